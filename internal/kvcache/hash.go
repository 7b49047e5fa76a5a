package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
)

// BlockHash identifies the content of a full block together with everything before it: the
// chained hash of the parent block, the block's token ids and the extra key.
type BlockHash [16]byte

// HashFunc computes a block's chained hash from its parent's hash (the zero BlockHash for the
// first block), the block's token ids and an extra key such as a per-request cache salt.
// It must be deterministic and must not retain tokens.
type HashFunc func(parent BlockHash, tokens []int32, extra string) BlockHash

// DefaultHash is the HashFunc used when Config.Hash is nil: SHA-256 over the parent hash,
// the length-prefixed extra key and the little-endian token ids, truncated to 128 bits.
//
// Collision argument: for N distinct blocks ever hashed, the chance that any two collide is
// at most N²/2^129 (birthday bound on a 128-bit output of a pseudorandom function); a
// trillion (2^40) blocks give under 2^-49. The length prefix on the extra key makes the byte
// encoding injective, so distinct (parent, tokens, extra) triples never hash the same bytes.
// And a collision alone still cannot serve wrong KV: a hit is verified against the block's
// stored tokens, parent hash and extra key, so a false hit needs a second, simultaneous
// collision in the parent chain.
func DefaultHash(parent BlockHash, tokens []int32, extra string) BlockHash {
	var stack [16 + 4 + 64 + 4*32]byte
	buf := stack[:0]
	buf = append(buf, parent[:]...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(extra)))
	buf = append(buf, extra...)
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	sum := sha256.Sum256(buf)
	var h BlockHash
	copy(h[:], sum[:16])
	return h
}

// ChainHashes returns the DefaultHash chain of the full blocks of tokens, blockSize tokens
// each, with extra as every block's extra key: the hashes a Manager with the default hash
// gives those blocks when it caches them (a trailing partial block has none).
func ChainHashes(tokens []int32, blockSize int, extra string) []BlockHash {
	if blockSize <= 0 {
		return nil
	}
	out := make([]BlockHash, 0, len(tokens)/blockSize)
	var parent BlockHash
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		parent = DefaultHash(parent, tokens[i:i+blockSize], extra)
		out = append(out, parent)
	}
	return out
}
