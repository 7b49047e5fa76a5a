package cudabackend

import (
	"fmt"
	"os"

	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// uploadFP8 uploads a quant.FP8 weight (inside Run): its E4M3 bytes as an FP8 [rows][cols]
// buffer and its row scales as an F32 buffer beside it, for the FP8 GEMV and the BF16
// dequantization of larger batches. A device below compute capability 8.9 is an error
// naming it. Rows whose length is not a multiple of 16 values (which the kernels' 16-byte
// units cannot read) are uploaded widened to BF16, said once on standard error.
func (b *Backend) uploadFP8(t *format.Tensor, rows, cols int) (*tensor, error) {
	info := b.dev.Info()
	if !info.SupportsFP8() {
		return nil, fmt.Errorf("cuda upload: tensor %q: FP8 weights need compute capability %d.%d or newer; device %d (%s) is %d.%d",
			t.Name, cuda.FP8MinMajor, cuda.FP8MinMinor, info.Ordinal, info.Name, info.Major, info.Minor)
	}
	if cols%16 != 0 {
		fmt.Fprintf(os.Stderr, "cuda: tensor %q: FP8 rows of %d values are not a multiple of 16: uploaded widened to BF16\n", t.Name, cols)
		buf, err := b.alloc(cuda.BF16, rows*cols)
		if err != nil {
			return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
		}
		if err := b.uploadDequantized(buf, t, rows, cols); err != nil {
			return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
		}
		return &tensor{buf: buf, shape: []int{rows, cols}}, nil
	}
	rb, err := quant.FP8.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
	}
	q := make([]byte, rows*cols)
	scales := make([]float32, rows)
	for r := range rows {
		row := t.Data[r*rb : (r+1)*rb]
		scales[r] = quant.FP8RowScale(row)
		copy(q[r*cols:(r+1)*cols], row[rb-cols:])
	}
	// The scratch of larger batches is reserved now, as for the block types: growing it
	// inside a graph capture would fail.
	n := min(rows, max(1, dequantScratch/cols)) * cols
	if err := b.grow(&b.dequant, cuda.BF16, n, n, "dequantization scratch"); err != nil {
		return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
	}
	buf, err := b.alloc(cuda.FP8, rows*cols)
	if err != nil {
		return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
	}
	sb, err := b.alloc(cuda.F32, rows)
	if err != nil {
		return nil, firstErr(fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err), b.free(buf))
	}
	if err := firstErr(cuda.Upload(b.dev, buf, q), cuda.Upload(b.dev, sb, scales)); err != nil {
		return nil, firstErr(fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err), b.free(buf), b.free(sb))
	}
	return &tensor{buf: buf, shape: []int{rows, cols}, scale: sb}, nil
}

// matMulFP8 computes y = x · wᵀ for an FP8 weight w (inside Run): the FP8 GEMV for up to
// cuda.GEMVMaxRows rows of x, else x cast to BF16 once and w's rows dequantized to BF16 a
// chunk at a time for cuBLAS, as matMulDequantized does for the block types.
func (b *Backend) matMulFP8(y, x cuda.Buffer, w *tensor, n int) error {
	m, k := w.rows(), w.cols()
	if n <= cuda.GEMVMaxRows {
		return b.ops.GEMVFP8(y, x, w.buf, w.scale, n, k, m)
	}
	chunk := b.dequant.Len / k
	if chunk == 0 {
		return fmt.Errorf("cuda matmul: no dequantization scratch for rows of %d fp8 values", k)
	}
	xc, err := b.castInput(x, n*k, cuda.BF16)
	if err != nil {
		return err
	}
	for r0 := 0; r0 < m; r0 += chunk {
		r1 := min(m, r0+chunk)
		part, err := w.buf.Slice(r0*k, r1*k)
		if err != nil {
			return err
		}
		sc, err := w.scale.Slice(r0, r1)
		if err != nil {
			return err
		}
		wd := cuda.Buffer{Ptr: b.dequant.Ptr, DType: cuda.BF16, Len: (r1 - r0) * k}
		yc := cuda.Buffer{Ptr: y.Ptr + uint64(4*r0), DType: cuda.F32, Len: y.Len - r0}
		if err := firstErr(b.ops.DequantizeFP8BF16(wd, part, sc, r1-r0, k), b.ops.MatMulTStrided(yc, xc, wd, n, k, r1-r0, m)); err != nil {
			return err
		}
	}
	return nil
}
