package cpu

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestGEMMPackReuse runs products that share, change or re-format the activations on one
// pool, so that packed activations are reused where they may be and repacked where they
// may not, and checks every result bit for bit against the same product on a fresh pool.
func TestGEMMPackReuse(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	const cols, nTokens = 256, 21
	wq, _ := randWeight(t, r, quant.Q8_0, 30, cols)
	wk, _ := randWeight(t, r, quant.Q8_0, 12, cols)
	wf, _ := randWeight(t, r, quant.F32, 18, cols)
	w4, _ := randWeight(t, r, quant.Q4_K, 24, cols)
	x := normals(r, nTokens*cols)
	fewer := normals(r, (nTokens-4)*cols)
	steps := []struct {
		name   string
		w      Weight
		x      []float32
		n      int
		change bool // modify x in place before the product
	}{
		{"q", wq, x, nTokens, false},
		{"k same x", wk, x, nTokens, false},
		{"v same x", wq, x, nTokens, false},
		{"x changed in place", wk, x, nTokens, true},
		{"f32 weights", wf, x, nTokens, false},
		{"q8_k activations", w4, x, nTokens, false},
		{"back to q8_0", wq, x, nTokens, false},
		{"fewer tokens", wk, fewer, nTokens - 4, false},
		{"more tokens again", wk, x, nTokens, false},
	}
	for _, p := range testPools(t, 2) {
		for i, s := range steps {
			if s.change {
				s.x[i*7] += 1.5
			}
			got := make([]float32, s.n*s.w.Rows)
			if err := MatMul(p, got, s.w, s.x, s.n); err != nil {
				t.Fatal(err)
			}
			fresh := newPoolWith(p.Threads(), p.kern)
			want := make([]float32, len(got))
			err := MatMul(fresh, want, s.w, s.x, s.n)
			fresh.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s/%s: result differs from a fresh pool's", p.KernelSet(), s.name)
			}
		}
	}
}
