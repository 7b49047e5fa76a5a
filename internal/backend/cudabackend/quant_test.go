package cudabackend

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// uploadQuantized quantizes vals ([rows][cols]) to qt on the host and uploads the blocks
// through UploadWeight; it returns the weight and the values the blocks decode to.
func uploadQuantized(t *testing.T, b *Backend, qt quant.Type, rows, cols int, vals []float32) (backend.Tensor, []float32) {
	t.Helper()
	rb, err := qt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	if err := quant.Quantize(qt, vals, data); err != nil {
		t.Fatal(err)
	}
	held := make([]float32, len(vals))
	if err := quant.Dequantize(qt, data, held); err != nil {
		t.Fatal(err)
	}
	var w backend.Tensor
	if err := b.Run(func() error {
		var err error
		w, err = b.UploadWeight(&format.Tensor{Name: "w", Type: qt, Shape: []int{rows, cols}, Data: data})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return w, held
}

// TestBackendQuantizedMatMul checks the matmuls of weights kept in their block layouts:
// for up to cuda.GEMVMaxRows rows (the gemvq kernels) against a float64 reference on the
// host decoder's values; for more rows (chunks of rows dequantized to BF16 for cuBLAS,
// several chunks for a weight larger than the scratch) against the same weight uploaded
// widened to BF16, which is the product the chunks must reproduce; MatMuls and
// MatMulSwiGLU over quantized weights too.
func TestBackendQuantizedMatMul(t *testing.T) {
	// The default cubin cache: both backends (and the other GPU tests) share one compile.
	split, split8 := cuda.GEMVSplit, cuda.GEMVSplitX8
	b := openBackend(t, BackendOptions{QuantGEMV: &split})   // float activations; MatMuls and MatMulSwiGLU in one launch
	b8 := openBackend(t, BackendOptions{QuantGEMV: &split8}) // the default: activations rounded to 8 bits
	wide := openBackend(t, BackendOptions{WidenQuantized: true})
	packed := openBackend(t, BackendOptions{QuantGEMV: &split8, RepackQuantized: true}) // Q8_0, Q6_K repacked where they fit
	r := rand.New(rand.NewPCG(7, 9))
	for _, c := range []struct {
		qt         quant.Type
		rows, cols int
	}{{quant.Q8_0, 300, 512}, {quant.Q4_0, 70, 1024}, {quant.Q4_K, 300, 512}, {quant.Q5_K, 33, 768}, {quant.Q6_K, 130, 512}, {quant.Q6_K, 40, 2048}, {quant.Q3_K, 70, 512}, {quant.Q2_K, 33, 768},
		{quant.Q8_0, dequantScratch/1024 + 500, 1024}} {
		vals := randVals(r, c.rows*c.cols, 1)
		w, held := uploadQuantized(t, b, c.qt, c.rows, c.cols, vals)
		ww, _ := uploadQuantized(t, wide, c.qt, c.rows, c.cols, vals)
		if dt := w.(*tensor).buf.DType; !cuda.Quantized(dt) {
			t.Fatalf("%s weight uploaded as %s", c.qt, dt)
		}
		for _, n := range []int{1, 5, 40} {
			xv := randVals(r, n*c.cols, 1)
			x, _ := uploadMatrix(t, b, cuda.F32, n, c.cols, xv)
			xw, _ := uploadMatrix(t, wide, cuda.F32, n, c.cols, xv)
			out, outw := newOut(t, b, n, c.rows), newOut(t, wide, n, c.rows)
			if err := firstErr(b.Run(func() error { return b.MatMul(out, x, w) }), wide.Run(func() error { return wide.MatMul(outw, xw, ww) })); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("matmul %s n=%d %dx%d", c.qt, n, c.rows, c.cols)
			if n <= cuda.GEMVMaxRows {
				want := backendtest.MatMulRef(xv, held, n, c.cols, c.rows)
				check(t, name, cuda.F32, tensorValues(t, b, out), want)
				w8, _ := uploadQuantized(t, b8, c.qt, c.rows, c.cols, vals)
				x8, _ := uploadMatrix(t, b8, cuda.F32, n, c.cols, xv)
				out8 := newOut(t, b8, n, c.rows)
				if err := b8.Run(func() error { return b8.MatMul(out8, x8, w8) }); err != nil {
					t.Fatal(err)
				}
				check(t, name+" int8 activations", cuda.BF16, tensorValues(t, b8, out8), want) // BF16's 1e-2 bound
				// Repacked, the same units in the same order: the same sums bit for bit.
				wp, _ := uploadQuantized(t, packed, c.qt, c.rows, c.cols, vals)
				xp, _ := uploadMatrix(t, packed, cuda.F32, n, c.cols, xv)
				outp := newOut(t, packed, n, c.rows)
				if err := packed.Run(func() error { return packed.MatMul(outp, xp, wp) }); err != nil {
					t.Fatal(err)
				}
				if dt := wp.(*tensor).buf.DType; dt != cuda.Repacked(w8.(*tensor).buf.DType, c.cols) {
					t.Errorf("%s: the repacking backend holds it as %s", name, dt)
				}
				if got, want := tensorValues(t, packed, outp), tensorValues(t, b8, out8); !slices.Equal(got, want) {
					t.Errorf("%s: repacked weights give other products than GGML's layout", name)
				}
			} else {
				check(t, name+" vs widened", cuda.F32, tensorValues(t, b, out), f64s(tensorValues(t, wide, outw)))
			}
		}
	}
	// Three weights at once and gate/up with their SwiGLU, quantized, at both paths.
	for _, n := range []int{5, 40} {
		k, m := 512, 96
		xv := randVals(r, n*k, 1)
		x, _ := uploadMatrix(t, b, cuda.F32, n, k, xv)
		var ws []backend.Tensor
		var helds [][]float32
		for range 3 {
			w, h := uploadQuantized(t, b, quant.Q4_K, m, k, randVals(r, m*k, 1))
			ws, helds = append(ws, w), append(helds, h)
		}
		outs := []backend.Tensor{newOut(t, b, n, m), newOut(t, b, n, m), newOut(t, b, n, m)}
		glu := newOut(t, b, n, m)
		if err := b.Run(func() error {
			return firstErr(b.MatMuls(outs, x, ws), b.MatMulSwiGLU(glu, x, ws[0], ws[1]))
		}); err != nil {
			t.Fatal(err)
		}
		tol := cuda.F32
		if n > cuda.GEMVMaxRows {
			tol = cuda.BF16 // x and the weights in BF16 for cuBLAS
		}
		for i := range ws {
			check(t, fmt.Sprintf("matmuls q4_k n=%d w[%d]", n, i), tol, tensorValues(t, b, outs[i]), backendtest.MatMulRef(xv, helds[i], n, k, m))
		}
		want := swigluRef(backendtest.MatMulRef(xv, helds[0], n, k, m), backendtest.MatMulRef(xv, helds[1], n, k, m))
		check(t, fmt.Sprintf("matmul swiglu q4_k n=%d", n), tol, tensorValues(t, b, glu), want)
	}
}

// f64s widens float32 values.
func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
