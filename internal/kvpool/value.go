package kvpool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// valueMagic starts every stored value: the format and its version.
var valueMagic = [4]byte{'K', 'V', 'B', '1'}

// castagnoli is the CRC-32C table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Value layout, little-endian:
//
//	magic "KVB1"          4 bytes
//	hash, parent hash     16 + 16 bytes
//	token count n         4 bytes
//	tokens                4n bytes
//	keys and values       the rest but the last 4 bytes
//	CRC-32C               4 bytes, of everything before it
const valueHeader = 4 + 16 + 16 + 4

// errCorrupt is a stored value that fails its checks.
var errCorrupt = errors.New("corrupt value")

// encodeValue returns the stored form of block ref's keys and values kv.
func encodeValue(ref kvcache.BlockRef, kv []byte) []byte {
	out := make([]byte, 0, valueHeader+4*len(ref.Tokens)+len(kv)+4)
	out = append(out, valueMagic[:]...)
	out = append(out, ref.Hash[:]...)
	out = append(out, ref.Parent[:]...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(ref.Tokens)))
	for _, t := range ref.Tokens {
		out = binary.LittleEndian.AppendUint32(out, uint32(t))
	}
	out = append(out, kv...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// decodeValue checks a stored value against the block ref it should hold (its hash,
// parent and tokens) and a block size of blockBytes, and returns its keys and values (a
// view into v). Any mismatch is an error wrapping errCorrupt.
func decodeValue(v []byte, ref kvcache.BlockRef, blockBytes int) ([]byte, error) {
	if len(v) < valueHeader+4 {
		return nil, fmt.Errorf("%w: %d bytes", errCorrupt, len(v))
	}
	body, sum := v[:len(v)-4], binary.LittleEndian.Uint32(v[len(v)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	if [4]byte(body[:4]) != valueMagic {
		return nil, fmt.Errorf("%w: magic %q", errCorrupt, body[:4])
	}
	if kvcache.BlockHash(body[4:20]) != ref.Hash || kvcache.BlockHash(body[20:36]) != ref.Parent {
		return nil, fmt.Errorf("%w: another block's value", errCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(body[36:40]))
	if n != len(ref.Tokens) || len(body) != valueHeader+4*n+blockBytes {
		return nil, fmt.Errorf("%w: %d tokens and %d bytes, want %d tokens and %d bytes of KV", errCorrupt, n, len(body)-valueHeader-4*n, len(ref.Tokens), blockBytes)
	}
	toks := body[valueHeader : valueHeader+4*n]
	for i, t := range ref.Tokens {
		if int32(binary.LittleEndian.Uint32(toks[4*i:])) != t {
			return nil, fmt.Errorf("%w: token %d differs", errCorrupt, i)
		}
	}
	return slices.Clip(body[valueHeader+4*n:]), nil
}
