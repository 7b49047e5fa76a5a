package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// KVCache holds the keys and values of every layer in fixed-size blocks of BlockSize token
// slots. Slot s is block s/BlockSize, offset s%BlockSize; which blocks belong to which
// sequence is the caller's business (block tables in the Batch).
type KVCache struct {
	BlockSize int
	NumBlocks int
	Layers    []*cpu.KVCacheLayer
}

// NewKVCache allocates a zeroed cache of numBlocks blocks of blockSize tokens for a model of
// config cfg.
func NewKVCache(cfg format.Config, numBlocks, blockSize int) (*KVCache, error) {
	if numBlocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("kv cache: %d blocks of %d tokens", numBlocks, blockSize)
	}
	kv := &KVCache{BlockSize: blockSize, NumBlocks: numBlocks, Layers: make([]*cpu.KVCacheLayer, cfg.Layers)}
	for l := range kv.Layers {
		layer, err := cpu.NewKVCacheLayer(numBlocks, blockSize, cfg.KVHeads, cfg.HeadDim)
		if err != nil {
			return nil, fmt.Errorf("kv cache: layer %d: %w", l, err)
		}
		kv.Layers[l] = layer
	}
	return kv, nil
}

// BytesPerToken returns the cache bytes one token takes across all layers (keys and values,
// float32).
func BytesPerToken(cfg format.Config) int64 {
	return int64(2 * cfg.Layers * cfg.KVHeads * cfg.HeadDim * 4)
}

// Slots returns the number of token slots the cache holds.
func (kv *KVCache) Slots() int { return kv.NumBlocks * kv.BlockSize }

// fits checks that the cache was made for a model of config c.
func (kv *KVCache) fits(c format.Config) error {
	if kv == nil || len(kv.Layers) != c.Layers {
		return fmt.Errorf("kv cache does not have the model's %d layers", c.Layers)
	}
	for l, layer := range kv.Layers {
		if layer == nil || layer.KVHeads != c.KVHeads || layer.HeadDim != c.HeadDim || layer.BlockSize != kv.BlockSize || layer.NumBlocks() != kv.NumBlocks {
			return fmt.Errorf("kv cache layer %d does not match the model (%d kv heads of %d)", l, c.KVHeads, c.HeadDim)
		}
	}
	return nil
}
