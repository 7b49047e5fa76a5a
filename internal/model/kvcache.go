package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// KVCache holds the keys and values of every layer in fixed-size blocks of BlockSize token
// slots, on the model's backend. Slot s is block s/BlockSize, offset s%BlockSize; which
// blocks belong to which sequence is the caller's business (block tables in the Batch).
//
// A split model's cache has one part per rank, on the rank's backend, holding the rank's
// layers and KV heads. The parts share one block numbering: block b of the cache is block b
// of every part, so one allocator accounts for them all.
type KVCache struct {
	BlockSize int
	NumBlocks int
	m         *Model
	parts     []backend.KVCache // one per rank
}

// NewKVCache allocates a zeroed cache of numBlocks blocks of blockSize tokens on the
// model's backends.
func (m *Model) NewKVCache(numBlocks, blockSize int) (*KVCache, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache: %d blocks of %d tokens", numBlocks, blockSize)
	}
	kv := &KVCache{BlockSize: blockSize, NumBlocks: numBlocks, m: m, parts: make([]backend.KVCache, len(m.ranks))}
	for r, s := range m.ranks {
		err := s.be.Run(func() error {
			var err error
			kv.parts[r], err = s.be.NewKVCache(s.kvSpec(numBlocks, blockSize, m.kvDT))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("kv cache of rank %d: %w", r, err)
		}
	}
	return kv, nil
}

// massLanes returns the rows of a sequence's attention mass (Seq.Mass): one per layer and
// KV head of the first rank's part (the model reports mass only when it is not split).
func (kv *KVCache) massLanes() int {
	sp := kv.parts[0].Spec()
	return max(1, sp.Layers*sp.KVHeads)
}

// kvSpec returns the geometry of the shard's part of a cache of dtype elements. An MLA
// model's cache holds its one vector a token once (the value is the key vector itself:
// ValuesAreKeys).
func (s *shard) kvSpec(numBlocks, blockSize int, dtype quant.Type) backend.KVSpec {
	c := s.cfg
	return backend.KVSpec{Layers: c.Layers, NumBlocks: numBlocks, BlockSize: blockSize,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: dtype, ValuesAreKeys: c.MLA()}
}

// KVBytesPerToken returns the cache bytes one token takes, over all layers and all ranks:
// keys and values of Options.KVCacheDType (or of the size a backend reports for it, see
// backend.KVRowBytes).
func (m *Model) KVBytesPerToken() int64 {
	var n int64
	for _, s := range m.ranks {
		n += KVBytesPerToken(s.cfg, backend.KVRowBytes(s.be, m.kvDT, s.cfg.HeadDim))
	}
	return n
}

// KVRowBytes returns the bytes one cached key or value head vector takes on the first
// rank (every rank's backend is of one kind, and every rank has the model's head
// dimension).
func (m *Model) KVRowBytes() int {
	return backend.KVRowBytes(m.ranks[0].be, m.kvDT, m.ranks[0].cfg.HeadDim)
}

// KVCacheDType returns the element type of the caches the model makes.
func (m *Model) KVCacheDType() quant.Type { return m.kvDT }

// KVBytesPerToken returns the cache bytes one token takes across all layers, keys and
// values of rowBytes bytes per head vector each (an MLA model's one vector held once).
func KVBytesPerToken(cfg format.Config, rowBytes int) int64 {
	return int64(KVVectors(cfg) * cfg.Layers * cfg.KVHeads * rowBytes)
}

// KVVectors returns how many vectors of a kv head the cache of a model of cfg holds a
// token and layer: 2 (its key and its value), or 1 for an MLA model, whose value is its
// key vector (backend.KVSpec.ValuesAreKeys).
func KVVectors(cfg format.Config) int {
	if cfg.MLA() {
		return 1
	}
	return 2
}

// Slots returns the number of token slots the cache holds.
func (kv *KVCache) Slots() int { return kv.NumBlocks * kv.BlockSize }

// Specs returns the geometry of each rank's part of the cache, in rank order.
func (kv *KVCache) Specs() []backend.KVSpec {
	specs := make([]backend.KVSpec, len(kv.parts))
	for r, p := range kv.parts {
		specs[r] = p.Spec()
	}
	return specs
}

// CopyBlocks copies blocks as ordered (keys and values, every layer), in order, in every
// rank's part: the copy-on-write orders of the KV manager.
func (kv *KVCache) CopyBlocks(copies []backend.BlockCopy) error {
	if len(copies) == 0 {
		return nil
	}
	for r, s := range kv.m.ranks {
		if err := s.be.Run(func() error { return s.be.CopyBlocks(kv.parts[r], copies) }); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// fits checks that the cache was made for model m: by m itself or, when m is a view made
// by FirstLayers, by the model it views.
func (kv *KVCache) fits(m *Model) error {
	if kv == nil || !m.cacheOwner(kv) || len(kv.parts) != len(m.ranks) {
		return fmt.Errorf("kv cache was not made by this model")
	}
	for r, s := range kv.m.ranks {
		got, want := kv.parts[r].Spec(), s.kvSpec(kv.NumBlocks, kv.BlockSize, m.kvDT)
		if got.Layers != want.Layers || got.KVHeads != want.KVHeads || got.HeadDim != want.HeadDim ||
			got.BlockSize != want.BlockSize || got.NumBlocks != want.NumBlocks || got.ValuesAreKeys != want.ValuesAreKeys {
			return fmt.Errorf("kv cache of rank %d: %d layers of %d kv heads of %d do not match the model's %d of %d of %d",
				r, got.Layers, got.KVHeads, got.HeadDim, want.Layers, want.KVHeads, want.HeadDim)
		}
	}
	return nil
}
