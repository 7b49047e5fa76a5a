package cudabackend

import "github.com/kvasir-llm/kvasir/internal/backend/cuda"

// activationShadow records that the backend's cast scratch holds count float32 values
// at src rounded to dt, written by the producing op as the stream's work number seq.
// cuBLAS GEMMs need 16-bit activations; an op whose float32 output feeds such a GEMM
// (RMSNorm, the SwiGLU of MatMulSwiGLU) writes this copy as it goes, and castInput uses
// it instead of a cast launch while nothing else has been queued since (cuda.Device.Seq), so
// the copy cannot be stale.
type activationShadow struct {
	src   uint64
	dst   uint64 // the scratch it was written into (a grown scratch holds no shadow)
	count int
	dt    cuda.DType
	seq   uint64
}

// ensureScratch grows the cast scratch to hold count 16-bit values (inside Run; growing
// synchronizes, so it fails inside a graph capture).
func (b *Backend) ensureScratch(count int) error {
	if b.scratch.Len >= count {
		return nil
	}
	b.shadow = activationShadow{} // the shadow stays in the old scratch
	return b.grow(&b.scratch, cuda.BF16, count, count, "matmul scratch")
}

// shadowTarget returns the scratch view a producing op of rows x cols float32 values
// writes its 16-bit shadow into, or ok = false when no shadow is wanted: shadows off, no
// more rows than the GEMV kernels take (they read float32), or a scratch too small
// during a capture.
func (b *Backend) shadowTarget(rows, cols int, dt cuda.DType) (cuda.Buffer, bool) {
	if !b.shadows || rows <= cuda.GEMVMaxRows || (dt != cuda.BF16 && dt != cuda.F16) {
		return cuda.Buffer{}, false
	}
	n := rows * cols
	if b.scratch.Len < n && (b.capturing || b.ensureScratch(n) != nil) {
		return cuda.Buffer{}, false
	}
	return cuda.Buffer{Ptr: b.scratch.Ptr, DType: dt, Len: n}, true
}

// setShadow records that the scratch now holds the shadow of count values at src (call
// right after the producing launch).
func (b *Backend) setShadow(src uint64, count int, dt cuda.DType) {
	b.shadow = activationShadow{src: src, dst: b.scratch.Ptr, count: count, dt: dt, seq: b.dev.Seq()}
}

// shadowOf returns the scratch's shadow of the count float32 values at x as dt, when
// it is there and current.
func (b *Backend) shadowOf(x cuda.Buffer, count int, dt cuda.DType) (cuda.Buffer, bool) {
	s := b.shadow
	if !b.shadows || s.src != x.Ptr || s.count != count || s.dt != dt || s.seq != b.dev.Seq() ||
		s.dst != b.scratch.Ptr || b.scratch.Len < count {
		return cuda.Buffer{}, false
	}
	return cuda.Buffer{Ptr: b.scratch.Ptr, DType: dt, Len: count}, true
}

// x8Target reports whether a producing op of rows x cols float32 values (RMSNorm, the
// SwiGLU of MatMulSwiGLU) should also write their int8 rounding for the quantized GEMV that
// reads them next (cuda.Ops.RMSNormX8, SwiGLUX8), sparing that GEMV its rounding launch:
// shadows on, decode's int8 layout, block-type weights on the device, no more rows than a
// GEMV takes, and an x8 scratch that holds them.
func (b *Backend) x8Target(rows, cols int) bool {
	return b.shadows && b.blockTyped && b.quantGEMV.Int8() && rows <= cuda.GEMVMaxRows && cols%16 == 0 &&
		b.ops.X8.Holds(rows*cols)
}
