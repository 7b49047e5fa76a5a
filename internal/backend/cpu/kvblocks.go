package cpu

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// HostBytes returns the bytes of one block of the layer in the host layout: its keys,
// then its values (BlockBytes each), or the keys alone when the values are the keys.
func (c *KVCacheLayer) HostBytes() int {
	if c.ValuesAreKeys {
		return c.BlockBytes()
	}
	return 2 * c.BlockBytes()
}

// BlockBytes returns the bytes of one block's keys (or values) in the layer:
// BlockSize x KVHeads x HeadDim elements of DType, little-endian; in a quantized layer the
// block's codes and then its float32 scales (kvquant.RowBytes per head vector).
func (c *KVCacheLayer) BlockBytes() int {
	return c.BlockSize * c.KVHeads * kvquant.RowBytes(c.DType, c.HeadDim)
}

// ReadBlock copies block b's keys into k and its values into v, BlockBytes each, as the
// cache holds them: slot after slot, head after head, little-endian elements of DType. A
// layer whose values are its keys takes an empty v.
func (c *KVCacheLayer) ReadBlock(b int, k, v []byte) error {
	kc, vc, err := c.blockBytes("read block", b, len(k), len(v))
	if err != nil {
		return err
	}
	for _, p := range kc {
		k = k[copy(k, p):]
	}
	for _, p := range vc {
		v = v[copy(v, p):]
	}
	return nil
}

// WriteBlock overwrites block b's keys from k and its values from v, laid out as
// ReadBlock writes them.
func (c *KVCacheLayer) WriteBlock(b int, k, v []byte) error {
	kc, vc, err := c.blockBytes("write block", b, len(k), len(v))
	if err != nil {
		return err
	}
	for _, p := range kc {
		k = k[copy(p, k):]
	}
	for _, p := range vc {
		v = v[copy(p, v):]
	}
	return nil
}

// blockBytes returns the bytes of block b's keys and values in the cache, in the order of
// the host layout (the F32 cache's values viewed as their little-endian bytes; a quantized
// cache's codes, then its scales), checking b and the sizes kn and vn of the caller's
// buffers.
func (c *KVCacheLayer) blockBytes(op string, b, kn, vn int) (k, v [][]byte, err error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	if n := c.NumBlocks(); b < 0 || b >= n {
		return nil, nil, fmt.Errorf("cpu: kv cache: %s %d: outside the cache's %d blocks", op, b, n)
	}
	per := c.BlockBytes()
	if c.ValuesAreKeys {
		if kn != per || vn != 0 {
			return nil, nil, fmt.Errorf("cpu: kv cache: %s: buffers of %d and %d bytes for blocks of %d keys (the values are the keys)", op, kn, vn, per)
		}
		k, _, err := c.layerBlockBytes(b, per)
		return k, nil, err
	}
	if kn != per || vn != per {
		return nil, nil, fmt.Errorf("cpu: kv cache: %s: buffers of %d and %d bytes for blocks of %d", op, kn, vn, per)
	}
	return c.layerBlockBytes(b, per)
}

// layerBlockBytes returns the bytes of block b's keys and values, per bytes each.
func (c *KVCacheLayer) layerBlockBytes(b, per int) (k, v [][]byte, err error) {
	switch {
	case c.quantized():
		n := c.BlockSize * c.KVHeads * c.HeadDim
		g := n / c.group()
		return [][]byte{c.K8[b*n:][:n], f32Bytes(c.KS[b*g:][:g])}, [][]byte{c.V8[b*n:][:n], f32Bytes(c.VS[b*g:][:g])}, nil
	case c.DType == quant.F16:
		return [][]byte{c.K16[b*per:][:per]}, [][]byte{c.V16[b*per:][:per]}, nil
	}
	return [][]byte{f32Bytes(c.K)[b*per:][:per]}, [][]byte{f32Bytes(c.V)[b*per:][:per]}, nil
}
