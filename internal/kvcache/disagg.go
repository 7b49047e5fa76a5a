package kvcache

import (
	"fmt"
	"slices"
)

// Export describes a request's KV blocks for moving them to another engine (prefill/decode
// disaggregation): the transfer layer reads the KV of Table's blocks; Hashes let the
// receiver skip blocks it already caches.
//
// The contents move through the backend op set: model.KVCache.ReadBlocks copies the keys
// and values of Table's blocks, every layer (and every rank of a split model), into host
// memory in a layout that does not depend on the backend (backend.KVSpec), and the
// receiver's model.KVCache.WriteBlocks puts them into the blocks ImportBlocks gave it
// (Import.Table past its cached prefix), so a CPU and a GPU instance of one model with the
// same split, block size and KV element type exchange blocks byte for byte.
type Export struct {
	// BlockSize is the sender's tokens per block; the receiver must use the same.
	BlockSize int
	// Table is the request's block table, in logical order.
	Table []BlockID
	// Hashes are the chained hashes of the request's leading finalized full blocks.
	Hashes []BlockHash
	// Salt is the request's cache salt.
	Salt string
}

// ExportBlocks returns request id's blocks for a transfer. The request keeps its blocks:
// the sender frees it (Free) once the transfer is done.
func (m *Manager) ExportBlocks(id RequestID) (Export, error) {
	s := m.seqs[id]
	if s == nil {
		return Export{}, fmt.Errorf("kvcache: export %q: unknown request", id)
	}
	return Export{
		BlockSize: m.pool.blockSize,
		Table:     slices.Clone(s.table),
		Hashes:    slices.Clone(s.hashes[:s.numCached]),
		Salt:      s.salt,
	}, nil
}

// Import says where a transferred request's KV goes on the receiving side.
type Import struct {
	// Table is the request's new block table, with slots for all its tokens.
	Table []BlockID
	// NumCachedTokens leading tokens were found in the local prefix cache: the blocks
	// Table[:NumCachedTokens/BlockSize] already hold their KV and need no transfer.
	NumCachedTokens int
}

// ImportBlocks admits request id, whose KV for all of tokens is computed elsewhere: it takes
// local prefix-cache hits (every full block may hit, since no logits are needed) and
// allocates blocks for the rest. It returns false, changing nothing, when the pool has too
// few free blocks. Once the transferred KV has landed (model.KVCache.WriteBlocks into
// Import.Table[NumCachedTokens/BlockSize:]), call CacheFullBlocks(id, tokens, len(tokens))
// to cache it.
func (m *Manager) ImportBlocks(id RequestID, tokens []int32, salt string) (Import, bool, error) {
	if m.seqs[id] != nil {
		return Import{}, false, fmt.Errorf("kvcache: import %q: request already exists", id)
	}
	hits, n := m.lookupPrefix(tokens, salt, len(tokens), false)
	ok, err := m.Allocate(id, Alloc{NumComputed: n, NumNew: len(tokens) - n, Computed: hits, Salt: salt})
	if !ok || err != nil {
		return Import{}, false, err
	}
	return Import{Table: m.BlockTable(id), NumCachedTokens: n}, true, nil
}

// PinPrefix holds, under request id, the longest cached prefix of tokens hashed with salt
// (every full block may hit), so that the sender of a transfer can read those blocks while
// nothing else can evict or overwrite them; Free(id) lets them go. It returns the pinned
// blocks as an Export (no blocks, and no request made, when nothing of tokens is cached).
func (m *Manager) PinPrefix(id RequestID, tokens []int32, salt string) (Export, error) {
	if m.seqs[id] != nil {
		return Export{}, fmt.Errorf("kvcache: pin %q: request already exists", id)
	}
	hits, n := m.lookupPrefix(tokens, salt, len(tokens), false)
	if n == 0 {
		return Export{BlockSize: m.pool.blockSize, Salt: salt}, nil
	}
	ok, err := m.Allocate(id, Alloc{NumComputed: n, Computed: hits, Salt: salt})
	if err != nil {
		return Export{}, err
	}
	if !ok {
		// Cannot happen: taking cached blocks needs no free block beyond themselves.
		return Export{}, fmt.Errorf("kvcache: pin %q: %d cached blocks could not be taken", id, len(hits))
	}
	return m.ExportBlocks(id)
}

// BlockRef names a full block's content outside the cache (a shared pool, a host tier): its
// chained hash, its parent's, and its token ids, which a store may keep beside the keys and
// values to verify a hit as the prefix cache does.
type BlockRef struct {
	Hash, Parent BlockHash
	Tokens       []int32
}

// BlockRefs returns the BlockRefs of the full blocks of tokens from block from to block to
// (exclusive), chained with DefaultHash and salt: hashes[i] must be the hash of block i
// (from ChainHashes). tokens[i*blockSize:(i+1)*blockSize] back each ref's Tokens.
func BlockRefs(tokens []int32, hashes []BlockHash, blockSize, from, to int) []BlockRef {
	refs := make([]BlockRef, 0, max(0, to-from))
	for i := from; i < to; i++ {
		r := BlockRef{Hash: hashes[i], Tokens: tokens[i*blockSize : (i+1)*blockSize]}
		if i > 0 {
			r.Parent = hashes[i-1]
		}
		refs = append(refs, r)
	}
	return refs
}
