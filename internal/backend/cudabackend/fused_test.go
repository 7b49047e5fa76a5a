package cudabackend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// newTestBackend opens a Backend on device 0 with its kernels in a fresh cache, or skips
// the test without a CUDA driver or device.
func newTestBackend(t *testing.T) *Backend {
	t.Helper()
	return openBackend(t, BackendOptions{Cache: &cuda.CubinCache{Dir: t.TempDir()}})
}

// uploadMatrix uploads vals as a [rows][cols] weight of dt through UploadWeight and
// returns it with the values as the device holds them.
func uploadMatrix(t *testing.T, b *Backend, dt cuda.DType, rows, cols int, vals []float32) (backend.Tensor, []float32) {
	t.Helper()
	held := make([]float32, len(vals))
	var data []byte
	var qt quant.Type
	switch dt {
	case cuda.F32:
		qt, data = quant.F32, make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			held[i] = v
		}
	case cuda.F16, cuda.BF16:
		qt, data = quant.BF16, make([]byte, 2*len(vals))
		if dt == cuda.F16 {
			qt = quant.F16
		}
		for i, v := range vals {
			h := quant.F32ToBF16(v)
			held[i] = quant.BF16ToF32(h)
			if dt == cuda.F16 {
				h = quant.F32ToF16(v)
				held[i] = quant.F16ToF32(h)
			}
			binary.LittleEndian.PutUint16(data[2*i:], h)
		}
	default:
		t.Fatalf("upload: dtype %s", dt)
	}
	var w backend.Tensor
	err := b.Run(func() error {
		var err error
		w, err = b.UploadWeight(&format.Tensor{Name: "w", Type: qt, Shape: []int{rows, cols}, Data: data})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return w, held
}

// newOut allocates an F32 [rows][cols] tensor filled with NaN bit patterns.
func newOut(t *testing.T, b *Backend, rows, cols int) backend.Tensor {
	t.Helper()
	var o backend.Tensor
	err := b.Run(func() error {
		var err error
		if o, err = b.NewTensor(quant.F32, rows, cols); err != nil {
			return err
		}
		return b.dev.Fill32(o.(*tensor).buf, 0x7fc07fff)
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// tensorValues downloads an F32 tensor.
func tensorValues(t *testing.T, b *Backend, x backend.Tensor) []float32 {
	t.Helper()
	c := x.(*tensor)
	out := make([]float32, c.rows()*c.cols())
	if err := b.Run(func() error {
		return cuda.Download(b.dev, out, cuda.Buffer{Ptr: c.buf.Ptr, DType: cuda.F32, Len: len(out)})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// swigluRef is silu(g) * u element by element, in float64.
func swigluRef(g, u []float64) []float64 {
	out := make([]float64, len(g))
	for i := range g {
		out[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return out
}

// fusedCase is one shape of the fused-projection tests: n token rows of k values and the
// weights' row counts.
type fusedCase struct {
	n, k int
	ms   []int
}

// TestBackendFusedMatMuls checks Backend.MatMuls and Backend.MatMulSwiGLU against a
// float64 reference for GEMV-sized and cuBLAS-sized row counts, odd weight row counts,
// 16-bit and F32 weights, k not a multiple of 8, more weights than one launch takes, and
// inside a CUDA graph (captured, then replayed on new inputs).
func TestBackendFusedMatMuls(t *testing.T) {
	b := newTestBackend(t)
	r := rand.New(rand.NewPCG(3, 5))
	cases := []fusedCase{
		{1, 1000, []int{37, 9, 20}},
		{2, 72, []int{5, 3, 11}},
		{3, 1000, []int{37, 9, 20, 3}},
		{5, 4096, []int{64, 16, 16}},
		{8, 1000, []int{37, 9}},
		{9, 1000, []int{37, 9, 20}},
		{40, 72, []int{33, 7, 7}},
		{4, 36, []int{13, 5, 5}}, // k % 8 != 0: cuBLAS at any row count
	}
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16, cuda.F32} {
		for _, c := range cases {
			if dt == cuda.F32 && c.n > 3 {
				continue
			}
			name := fmt.Sprintf("%s n=%d k=%d m=%v", dt, c.n, c.k, c.ms)
			xt, xh := uploadMatrix(t, b, cuda.F32, c.n, c.k, randVals(r, c.n*c.k, 1))
			ws, outs := make([]backend.Tensor, len(c.ms)), make([]backend.Tensor, len(c.ms))
			whs := make([][]float32, len(c.ms))
			for i, m := range c.ms {
				ws[i], whs[i] = uploadMatrix(t, b, dt, m, c.k, randVals(r, m*c.k, 1))
				outs[i] = newOut(t, b, c.n, m)
			}
			tl := cuda.F32 // the GEMV kernels and F32 cuBLAS keep float32 inputs
			if dt != cuda.F32 && (c.n > cuda.GEMVMaxRows || c.k%8 != 0) {
				tl = dt // cuBLAS on x cast to the weights' type
			}
			if err := b.Run(func() error { return b.MatMuls(outs, xt, ws) }); err != nil {
				t.Fatalf("matmuls %s: %v", name, err)
			}
			for i, m := range c.ms {
				check(t, fmt.Sprintf("matmuls %s [%d]", name, i), tl, tensorValues(t, b, outs[i]), backendtest.MatMulRef(xh, whs[i], c.n, c.k, m))
			}
			m := c.ms[0]
			gt, gh := uploadMatrix(t, b, dt, m, c.k, randVals(r, m*c.k, 1))
			ut, uh := uploadMatrix(t, b, dt, m, c.k, randVals(r, m*c.k, 1))
			out := newOut(t, b, c.n, m)
			if err := b.Run(func() error { return b.MatMulSwiGLU(out, xt, gt, ut) }); err != nil {
				t.Fatalf("matmul swiglu %s: %v", name, err)
			}
			want := swigluRef(backendtest.MatMulRef(xh, gh, c.n, c.k, m), backendtest.MatMulRef(xh, uh, c.n, c.k, m))
			check(t, fmt.Sprintf("matmul swiglu %s", name), tl, tensorValues(t, b, out), want)
		}
	}
	for _, n := range []int{1, 6, 16} {
		testFusedGraph(t, b, r, n)
	}
}

// testFusedGraph runs MatMuls and MatMulSwiGLU on n rows eagerly, captures them in a CUDA
// graph, then uploads new inputs and replays the graph: the outputs must follow the new
// inputs.
func testFusedGraph(t *testing.T, b *Backend, r *rand.Rand, n int) {
	const k = 512
	ms := []int{96, 31, 31}
	xt, _ := uploadMatrix(t, b, cuda.F32, n, k, randVals(r, n*k, 1))
	ws, outs, whs := make([]backend.Tensor, 3), make([]backend.Tensor, 3), make([][]float32, 3)
	for i, m := range ms {
		ws[i], whs[i] = uploadMatrix(t, b, cuda.BF16, m, k, randVals(r, m*k, 1))
		outs[i] = newOut(t, b, n, m)
	}
	gt, gh := uploadMatrix(t, b, cuda.BF16, 77, k, randVals(r, 77*k, 1))
	ut, uh := uploadMatrix(t, b, cuda.BF16, 77, k, randVals(r, 77*k, 1))
	glu := newOut(t, b, n, 77)
	ops := func() error {
		return firstErr(b.MatMuls(outs, xt, ws), b.MatMulSwiGLU(glu, xt, gt, ut))
	}
	var g *cuda.Graph
	err := b.Run(func() error {
		if err := ops(); err != nil { // eager: scratch buffers get allocated
			return err
		}
		var err error
		g, err = b.dev.Capture(ops)
		return err
	})
	if err != nil {
		t.Fatalf("graph n=%d: %v", n, err)
	}
	xv := randVals(r, n*k, 1)
	err = b.Run(func() error {
		defer b.dev.FreeGraph(g)
		for _, o := range append(outs, glu) {
			if err := b.dev.Fill32(o.(*tensor).buf, 0x7fc07fff); err != nil {
				return err
			}
		}
		if err := cuda.Upload(b.dev, xt.(*tensor).buf, xv); err != nil {
			return err
		}
		return firstErr(b.dev.LaunchGraph(g), b.dev.Sync())
	})
	if err != nil {
		t.Fatalf("graph n=%d replay: %v", n, err)
	}
	for i, m := range ms {
		check(t, fmt.Sprintf("matmuls graph n=%d [%d]", n, i), graphTol(n), tensorValues(t, b, outs[i]), backendtest.MatMulRef(xv, whs[i], n, k, m))
	}
	want := swigluRef(backendtest.MatMulRef(xv, gh, n, k, 77), backendtest.MatMulRef(xv, uh, n, k, 77))
	check(t, fmt.Sprintf("matmul swiglu graph n=%d", n), graphTol(n), tensorValues(t, b, glu), want)
}

// graphTol is the tolerance type of testFusedGraph's BF16 products of n rows.
func graphTol(n int) cuda.DType {
	if n > cuda.GEMVMaxRows {
		return cuda.BF16
	}
	return cuda.F32
}
