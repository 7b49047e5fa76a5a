package cuda

import (
	"strings"
	"testing"
)

// TestKVCacheLayerQuantized: a quantized layer checks its codes and scales (types, sizes,
// groups that divide the head), the kernels that read only plain caches refuse it by its
// code type, and the kernel choices name the shapes their instances cover.
func TestKVCacheLayerQuantized(t *testing.T) {
	const blocks, bs, kvHeads, hd = 4, 16, 2, 64
	n := blocks * bs * kvHeads * hd
	buf := func(dt DType, n int) Buffer { return Buffer{Ptr: 1 << 20, DType: dt, Len: n} }
	good := func() *KVCacheLayer {
		return &KVCacheLayer{K: buf(U8, n), V: buf(U8, n), KS: buf(F32, n/32), VS: buf(F32, n/32),
			NumBlocks: blocks, BlockSize: bs, KVHeads: kvHeads, HeadDim: hd, Codes: KVE4M3, Group: 32}
	}
	if err := good().Check("test"); err != nil {
		t.Fatalf("a good quantized layer: %v", err)
	}
	for name, bad := range map[string]func(*KVCacheLayer){
		"short scales":       func(c *KVCacheLayer) { c.VS.Len = n/32 - 1 },
		"short codes":        func(c *KVCacheLayer) { c.K.Len = n - 1 },
		"f16 codes":          func(c *KVCacheLayer) { c.K.DType, c.V.DType = F16, F16 },
		"no scales":          func(c *KVCacheLayer) { c.KS = Buffer{} },
		"group 0":            func(c *KVCacheLayer) { c.Group = 0 },
		"group not dividing": func(c *KVCacheLayer) { c.Group = 48 },
		"unknown codes":      func(c *KVCacheLayer) { c.Codes = 9 },
	} {
		c := good()
		bad(c)
		if err := c.Check("test"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := good().refuseQuantized("attention mass"); err == nil || !strings.Contains(err.Error(), "e4m3") {
		t.Errorf("a quantized layer in a plain-only kernel: %v, want an error naming e4m3", err)
	}
	plain := &KVCacheLayer{K: buf(BF16, n), V: buf(BF16, n), NumBlocks: blocks, BlockSize: bs, KVHeads: kvHeads, HeadDim: hd}
	if err := firstErr(plain.Check("test"), plain.refuseQuantized("test")); err != nil {
		t.Errorf("a plain layer: %v", err)
	}
	for _, c := range []struct {
		group, hd int
		want      bool
	}{{1, 64, true}, {2, 128, true}, {4, 128, true}, {8, 64, true}, {3, 64, false}, {4, 96, false}, {16, 128, false}} {
		if got := QuantizedDecode(c.group, c.hd); got != c.want {
			t.Errorf("QuantizedDecode(%d, %d) = %v", c.group, c.hd, got)
		}
	}
	if !quantizedTensorCores(128, F32) || quantizedTensorCores(96, F32) || quantizedTensorCores(64, BF16) {
		t.Error("quantizedTensorCores: head sizes 64 and 128 with F32 output only")
	}
}
