package cudabackend_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestBackendFP8Model runs TinyStories-656K (F32, rows of 128 and 384 values) with its
// linear layers quantized to FP8 at load (model.Options.FP8) on the GPU and on the CPU
// backend, both from the same FP8 bytes: a 6-token prompt (the FP8 GEMV in every layer)
// must give the CPU's logits within 1e-3 (float32 sums in other orders, attention and the
// F32 output matrix on the GPU) and the same top token; a 40-token prompt (BF16
// dequantized chunks through cuBLAS) within BF16's error (the RESULT lines record both);
// 24 greedy decode steps give the CPU's tokens.
func TestBackendFP8Model(t *testing.T) {
	gpu := newBackend(t)
	if info := gpu.Device().Info(); !info.SupportsFP8() {
		t.Skipf("skipping: device %s is compute capability %d.%d, FP8 needs 8.9", info.Name, info.Major, info.Minor)
	}
	fm, err := format.Open(testdata.Path(t, "models/tinystories-656k"), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	cb := cpubackend.New(0)
	defer cb.Close()
	logitsOf := func(b backend.Backend, prompt []int32) []float32 {
		m, err := model.New(fm, model.Options{Backends: []backend.Backend{b}, FP8: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		_, logits := prefilled(t, m, prompt, 1)
		return logits
	}
	r := rand.New(rand.NewPCG(5, 6))
	long := make([]int32, 40)
	for i := range long {
		long[i] = int32(3 + r.IntN(fm.Config.VocabSize-3))
	}
	for _, c := range []struct {
		n   int
		tol float64
	}{{6, 1e-3}, {40, 2e-2}} {
		g, want := logitsOf(gpu, long[:c.n]), logitsOf(cb, long[:c.n])
		e := relErr(g, want)
		same := sample.Greedy(g) == sample.Greedy(want)
		fmt.Printf("RESULT|model|tinystories-656k fp8 prompt %d: logits rel. error cuda vs cpu backend|%.2e|top-1 equal %v\n", c.n, e, same)
		if !(e <= c.tol) {
			t.Errorf("prompt %d: logits rel. error %.3e against the CPU backend, over %.0e", c.n, e, c.tol)
		}
		if c.n == 6 && !same {
			t.Errorf("prompt %d: top token %d on the GPU, %d on the CPU", c.n, sample.Greedy(g), sample.Greedy(want))
		}
	}
	// 24 greedy decode steps (the GEMV in CUDA graphs on the GPU) give the CPU's tokens.
	greedy := func(b backend.Backend) []int32 {
		m, err := model.New(fm, model.Options{Backends: []backend.Backend{b}, FP8: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		_, out := greedyRun(t, m, long[:6], 24)
		return out
	}
	if g, c := greedy(gpu), greedy(cb); !slices.Equal(g, c) {
		t.Errorf("greedy decode: GPU %v, CPU %v", g, c)
	}
}
