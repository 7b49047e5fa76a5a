package cudabackend

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	cpukern "github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// fp8Tensor quantizes vals ([rows][cols]) to quant.FP8 row by row on the host; it returns
// the tensor and the values its rows decode to.
func fp8Tensor(t *testing.T, rows, cols int, vals []float32) (*format.Tensor, []float32) {
	t.Helper()
	rb, err := quant.FP8.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	held := make([]float32, len(vals))
	for r := range rows {
		row := data[r*rb : (r+1)*rb]
		if err := firstErr(quant.Quantize(quant.FP8, vals[r*cols:(r+1)*cols], row), quant.Dequantize(quant.FP8, row, held[r*cols:(r+1)*cols])); err != nil {
			t.Fatal(err)
		}
	}
	return &format.Tensor{Name: "w", Type: quant.FP8, Shape: []int{rows, cols}, Data: data}, held
}

// TestBackendFP8MatMul checks the FP8 weights' matmul on odd shapes against a float64
// reference on the host decoder's values and against the CPU backend's FP8 path on the
// same bytes: up to cuda.GEMVMaxRows rows (the FP8 GEMV) at float32's precision, more rows
// (x cast to BF16 and the rows dequantized to BF16 for cuBLAS, in several chunks for a
// weight larger than the scratch) at BF16's. A weight whose rows are not a multiple of 16
// values is uploaded widened to BF16 and still multiplies right; MatMuls and MatMulSwiGLU
// over FP8 weights take the path weight by weight.
func TestBackendFP8MatMul(t *testing.T) {
	b := openBackend(t, BackendOptions{})
	if info := b.dev.Info(); !info.SupportsFP8() {
		t.Skipf("skipping: device %s is compute capability %d.%d, FP8 needs 8.9", info.Name, info.Major, info.Minor)
	}
	cpu := cpubackend.New(2)
	defer cpu.Close()
	r := rand.New(rand.NewPCG(8, 9))
	for _, c := range []struct{ rows, cols int }{{37, 48}, {61, 208}, {300, 512}, {5, 4096}, {3, 40}, {dequantScratch/1024 + 500, 1024}} {
		ft, held := fp8Tensor(t, c.rows, c.cols, randVals(r, c.rows*c.cols, 0.05))
		var w backend.Tensor
		if err := b.Run(func() (err error) { w, err = b.UploadWeight(ft); return err }); err != nil {
			t.Fatal(err)
		}
		want := cuda.FP8
		if c.cols%16 != 0 {
			want = cuda.BF16
		}
		if dt := w.(*tensor).buf.DType; dt != want {
			t.Fatalf("fp8 %dx%d uploaded as %s, want %s", c.rows, c.cols, dt, want)
		}
		for _, n := range []int{1, 3, 8, 9, 40} {
			xv := randVals(r, n*c.cols, 1)
			x, _ := uploadMatrix(t, b, cuda.F32, n, c.cols, xv)
			out := newOut(t, b, n, c.rows)
			if err := b.Run(func() error { return b.MatMul(out, x, w) }); err != nil {
				t.Fatal(err)
			}
			got := tensorValues(t, b, out)
			tol := cuda.F32
			if n > cuda.GEMVMaxRows || want == cuda.BF16 {
				tol = cuda.BF16
			}
			name := fmt.Sprintf("matmul fp8 n=%d %dx%d", n, c.rows, c.cols)
			check(t, name, tol, got, backendtest.MatMulRef(xv, held, n, c.cols, c.rows))
			check(t, name+" vs cpu backend", tol, got, f64s(cpuMatMul(t, cpu, ft, xv, n, c.cols, c.rows)))
		}
	}
	for _, n := range []int{5, 40} {
		k, m := 512, 96
		xv := randVals(r, n*k, 1)
		x, _ := uploadMatrix(t, b, cuda.F32, n, k, xv)
		var ws []backend.Tensor
		var helds [][]float32
		for range 3 {
			ft, h := fp8Tensor(t, m, k, randVals(r, m*k, 0.05))
			var w backend.Tensor
			if err := b.Run(func() (err error) { w, err = b.UploadWeight(ft); return err }); err != nil {
				t.Fatal(err)
			}
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
			tol = cuda.BF16
		}
		for i := range ws {
			check(t, fmt.Sprintf("matmuls fp8 n=%d w[%d]", n, i), tol, tensorValues(t, b, outs[i]), backendtest.MatMulRef(xv, helds[i], n, k, m))
		}
		want := swigluRef(backendtest.MatMulRef(xv, helds[0], n, k, m), backendtest.MatMulRef(xv, helds[1], n, k, m))
		check(t, fmt.Sprintf("matmul swiglu fp8 n=%d", n), tol, tensorValues(t, b, glu), want)
	}
}

// cpuMatMul runs x ([n][k]) · wᵀ through the CPU backend's kernels (its pool's
// cpu.MatMul, which cpubackend's MatMul calls for FP8 weights).
func cpuMatMul(t *testing.T, cb *cpubackend.Backend, w *format.Tensor, xv []float32, n, k, m int) []float32 {
	t.Helper()
	out := make([]float32, n*m)
	if err := cpukern.MatMul(cb.Pool(), out, cpukern.Weight{Type: w.Type, Rows: m, Cols: k, Data: w.Data}, xv, n); err != nil {
		t.Fatal(err)
	}
	return out
}
