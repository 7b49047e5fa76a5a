package cudabackend

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// openBackend opens a Backend on device 0 with opt, or skips the test without a CUDA
// driver or device.
func openBackend(t *testing.T, opt BackendOptions) *Backend {
	t.Helper()
	gpuDriver(t)
	b, err := NewBackend(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// TestBackendOptions: the settings that were environment variables reach the backend and
// its device through BackendOptions (the device's own, PDL included, are tested in package
// cuda).
func TestBackendOptions(t *testing.T) {
	plain := openBackend(t, BackendOptions{})
	if !plain.shadows || plain.dev.OpTimed() {
		t.Errorf("default backend: shadows %v, op profile %v", plain.shadows, plain.dev.OpTimed())
	}
	knobs := openBackend(t, BackendOptions{OpTime: true, DisablePDL: true, DisableShadows: true})
	if knobs.shadows || !knobs.dev.OpTimed() {
		t.Errorf("OpTime, DisableShadows: shadows %v, op profile %v", knobs.shadows, knobs.dev.OpTimed())
	}
}

// TestBackendKVCacheDType: a KV cache holds the element type its spec asks for (the one
// road of the cache type to the GPU; a quantized type as codes and float32 scales per 32),
// and a type the GPU cache cannot hold is refused.
func TestBackendKVCacheDType(t *testing.T) {
	b := openBackend(t, BackendOptions{})
	spec := backend.KVSpec{Layers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 2, HeadDim: 64}
	for _, tc := range []struct {
		dt   quant.Type
		want cuda.DType
	}{{quant.F32, cuda.F32}, {quant.F16, cuda.F16}, {quant.BF16, cuda.BF16},
		{quant.KVInt8, cuda.U8}, {quant.KVFP8E4M3, cuda.U8}, {quant.KVFP8E5M2, cuda.U8}} {
		spec.DType = tc.dt
		var c backend.KVCache
		err := b.Run(func() (err error) {
			c, err = b.NewKVCache(spec)
			return err
		})
		if err != nil {
			t.Fatalf("%s cache: %v", tc.dt, err)
		}
		kv := c.(*kvCache)
		if got := c.Spec().DType; got != tc.dt || kv.layers[0].K.DType != tc.want || kv.layers[1].V.DType != tc.want {
			t.Errorf("%s cache: spec %s, buffers %s/%s", tc.dt, got, kv.layers[0].K.DType, kv.layers[1].V.DType)
		}
		if l := kv.layers[1]; tc.dt.KVQuantized() && (!l.Quantized() || l.KS.DType != cuda.F32 || l.Group != 32) {
			t.Errorf("%s cache: codes %s, scales %s, groups of %d", tc.dt, l.Codes, l.KS.DType, l.Group)
		}
	}
	for _, bad := range []quant.Type{quant.Q8_0, quant.I32} {
		spec.DType = bad
		if err := b.Run(func() error { _, err := b.NewKVCache(spec); return err }); err == nil {
			t.Errorf("a %s KV cache was made", bad)
		}
	}
}
