package cpubackend

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// The backend offers the model's fused projections.
var (
	_ backend.MultiMatMuler  = (*Backend)(nil)
	_ backend.SwiGLUMatMuler = (*Backend)(nil)
)

// quantWeight uploads a rows x cols weight of type wt made from normal values.
func quantWeight(t *testing.T, b *Backend, r *rand.Rand, wt quant.Type, rows, cols int) backend.Tensor {
	t.Helper()
	vals := make([]float32, rows*cols)
	for i := range vals {
		vals[i] = float32(r.NormFloat64())
	}
	rb, err := wt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	if err := quant.Quantize(wt, vals, data); err != nil {
		t.Fatal(err)
	}
	w, err := b.UploadWeight(&format.Tensor{Name: "w", Type: wt, Shape: []int{rows, cols}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// sameF32 reports whether a and b hold the same bits.
func sameF32(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestFusedProjections requires MatMuls and MatMulSwiGLU bit for bit equal to MatMul per
// weight (then SwiGLU), for weight types with a fused path, with kernels but no fused path,
// and without kernels, for one token, two and a batch.
func TestFusedProjections(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewSource(5))
	const cols = 256
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q6_K, quant.BF16, quant.Q5_0, quant.Q3_K} {
		ws := []backend.Tensor{quantWeight(t, b, r, wt, 40, cols), quantWeight(t, b, r, wt, 12, cols), quantWeight(t, b, r, wt, 12, cols)}
		up := quantWeight(t, b, r, wt, 40, cols)
		for _, n := range []int{1, 2, 7, 33} {
			x := f32Tensor(t, b, n, cols)
			for i := range x.f32 {
				x.f32[i] = float32(r.NormFloat64())
			}
			outs, want := make([]backend.Tensor, 3), make([]*tensor, 3)
			for i, w := range ws {
				rows := w.Shape()[0]
				outs[i], want[i] = f32Tensor(t, b, n, rows), f32Tensor(t, b, n, rows)
				if err := b.MatMul(want[i], x, w); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.MatMuls(outs, x, ws); err != nil {
				t.Fatal(err)
			}
			for i := range ws {
				if j := sameF32(outs[i].(*tensor).f32, want[i].f32); j >= 0 {
					t.Fatalf("%s, %d tokens: MatMuls weight %d out[%d] = %v, MatMul %v", wt, n, i, j, outs[i].(*tensor).f32[j], want[i].f32[j])
				}
			}

			u := f32Tensor(t, b, n, 40)
			if err := b.MatMul(u, x, up); err != nil {
				t.Fatal(err)
			}
			if err := b.SwiGLU(want[0], want[0], u); err != nil {
				t.Fatal(err)
			}
			got := f32Tensor(t, b, n, 40)
			if err := b.MatMulSwiGLU(got, x, ws[0], up); err != nil {
				t.Fatal(err)
			}
			if j := sameF32(got.f32, want[0].f32); j >= 0 {
				t.Fatalf("%s, %d tokens: MatMulSwiGLU out[%d] = %v, MatMul+SwiGLU %v", wt, n, j, got.f32[j], want[0].f32[j])
			}
		}
	}
}

// TestFusedProjectionsReject: bad operands are errors, never panics.
func TestFusedProjectionsReject(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewSource(6))
	w := quantWeight(t, b, r, quant.Q8_0, 8, 64)
	w2 := quantWeight(t, b, r, quant.Q8_0, 16, 64)
	x := f32Tensor(t, b, 2, 64)
	o := f32Tensor(t, b, 2, 8)
	cases := map[string]func() error{
		"counts":        func() error { return b.MatMuls([]backend.Tensor{o}, x, []backend.Tensor{w, w}) },
		"none":          func() error { return b.MatMuls(nil, x, nil) },
		"out shape":     func() error { return b.MatMuls([]backend.Tensor{o, o}, x, []backend.Tensor{w, w2}) },
		"x as weight":   func() error { return b.MatMuls([]backend.Tensor{o}, x, []backend.Tensor{x}) },
		"swiglu up":     func() error { return b.MatMulSwiGLU(o, x, w, w2) },
		"swiglu x rows": func() error { return b.MatMulSwiGLU(o, f32Tensor(t, b, 3, 64), w, w) },
	}
	for name, op := range cases {
		if err := op(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
