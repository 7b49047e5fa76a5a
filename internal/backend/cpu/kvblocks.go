package cpu

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// BlockBytes returns the bytes of one block's keys (or values) in the layer:
// BlockSize x KVHeads x HeadDim elements of DType, little-endian.
func (c *KVCacheLayer) BlockBytes() int {
	n := c.BlockSize * c.KVHeads * c.HeadDim
	if c.DType == quant.F16 {
		return 2 * n
	}
	return 4 * n
}

// ReadBlock copies block b's keys into k and its values into v, BlockBytes each, as the
// cache holds them: slot after slot, head after head, little-endian elements of DType.
func (c *KVCacheLayer) ReadBlock(b int, k, v []byte) error {
	kc, vc, err := c.blockBytes("read block", b, len(k), len(v))
	if err != nil {
		return err
	}
	copy(k, kc)
	copy(v, vc)
	return nil
}

// WriteBlock overwrites block b's keys from k and its values from v, laid out as
// ReadBlock writes them.
func (c *KVCacheLayer) WriteBlock(b int, k, v []byte) error {
	kc, vc, err := c.blockBytes("write block", b, len(k), len(v))
	if err != nil {
		return err
	}
	copy(kc, k)
	copy(vc, v)
	return nil
}

// blockBytes returns the bytes of block b's keys and values in the cache (the F32 cache's
// values viewed as their little-endian bytes), checking b and the sizes kn and vn of the
// caller's buffers.
func (c *KVCacheLayer) blockBytes(op string, b, kn, vn int) (k, v []byte, err error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	if n := c.NumBlocks(); b < 0 || b >= n {
		return nil, nil, fmt.Errorf("cpu: kv cache: %s %d: outside the cache's %d blocks", op, b, n)
	}
	per := c.BlockBytes()
	if kn != per || vn != per {
		return nil, nil, fmt.Errorf("cpu: kv cache: %s: buffers of %d and %d bytes for blocks of %d", op, kn, vn, per)
	}
	if c.DType == quant.F16 {
		return c.K16[b*per:][:per], c.V16[b*per:][:per], nil
	}
	return f32Bytes(c.K)[b*per:][:per], f32Bytes(c.V)[b*per:][:per], nil
}
