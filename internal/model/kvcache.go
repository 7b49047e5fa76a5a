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
type KVCache struct {
	BlockSize int
	NumBlocks int
	be        backend.Backend
	cache     backend.KVCache
}

// NewKVCache allocates a zeroed cache of numBlocks blocks of blockSize tokens on the
// model's backend.
func (m *Model) NewKVCache(numBlocks, blockSize int) (*KVCache, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache: %d blocks of %d tokens", numBlocks, blockSize)
	}
	c := m.cfg
	spec := backend.KVSpec{Layers: c.Layers, NumBlocks: numBlocks, BlockSize: blockSize,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: quant.F32}
	kv := &KVCache{BlockSize: blockSize, NumBlocks: numBlocks, be: m.be}
	err := m.be.Run(func() error {
		var err error
		kv.cache, err = m.be.NewKVCache(spec)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv cache: %w", err)
	}
	return kv, nil
}

// KVBytesPerToken returns the cache bytes one token takes across all layers on the model's
// backend: keys and values of the element size the backend's cache holds (BF16 on a GPU,
// float32 on the CPU).
func (m *Model) KVBytesPerToken() int64 {
	return KVBytesPerToken(m.cfg, backend.KVBytesPerElement(m.be))
}

// KVBytesPerToken returns the cache bytes one token takes across all layers, keys and
// values of elemBytes bytes each.
func KVBytesPerToken(cfg format.Config, elemBytes int) int64 {
	return int64(2 * cfg.Layers * cfg.KVHeads * cfg.HeadDim * elemBytes)
}

// Slots returns the number of token slots the cache holds.
func (kv *KVCache) Slots() int { return kv.NumBlocks * kv.BlockSize }

// CopyBlocks copies blocks as ordered (keys and values, every layer), in order: the
// copy-on-write orders of the KV manager.
func (kv *KVCache) CopyBlocks(copies []backend.BlockCopy) error {
	if len(copies) == 0 {
		return nil
	}
	return kv.be.Run(func() error { return kv.be.CopyBlocks(kv.cache, copies) })
}

// fits checks that the cache was made for model m.
func (kv *KVCache) fits(m *Model) error {
	if kv == nil || kv.cache == nil || kv.be != m.be {
		return fmt.Errorf("kv cache was not made on the model's backend")
	}
	c, s := m.cfg, kv.cache.Spec()
	if s.Layers != c.Layers || s.KVHeads != c.KVHeads || s.HeadDim != c.HeadDim || s.BlockSize != kv.BlockSize || s.NumBlocks != kv.NumBlocks {
		return fmt.Errorf("kv cache of %d layers of %d kv heads of %d does not match the model's %d of %d of %d",
			s.Layers, s.KVHeads, s.HeadDim, c.Layers, c.KVHeads, c.HeadDim)
	}
	return nil
}
