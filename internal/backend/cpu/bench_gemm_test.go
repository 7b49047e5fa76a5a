package cpu

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// BenchmarkGEMM times the many-token path at the shapes of a smollm2-135m decode batch of 32
// tokens (attention and MLP projections and the tied 49152-row output) and of tinyllama,
// on the default kernel set and 2 threads.
func BenchmarkGEMM(b *testing.B) {
	shapes := []struct {
		name       string
		rows, cols int
	}{
		{"qo", 576, 576}, {"kv", 192, 576}, {"up", 1536, 576}, {"down", 576, 1536},
		{"out", 49152, 576}, {"tl-up", 5632, 2048}, {"tl-down", 2048, 5632},
	}
	r := rand.New(rand.NewSource(5))
	p := testPool(2)
	defer p.Close()
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.BF16} {
		for _, sh := range shapes {
			for _, tokens := range []int{32} {
				b.Run(fmt.Sprintf("%s/%s/%dx%d/tokens=%d", wt, sh.name, sh.rows, sh.cols, tokens), func(b *testing.B) {
					w := benchWeight(r, wt, sh.rows, sh.cols)
					x := normals(r, tokens*sh.cols)
					out := make([]float32, tokens*sh.rows)
					best := time.Duration(1 << 62)
					for b.Loop() {
						start := time.Now()
						if err := MatMul(p, out, w, x, tokens); err != nil {
							b.Fatal(err)
						}
						best = min(best, time.Since(start))
					}
					flops := 2 * float64(sh.rows) * float64(sh.cols) * float64(tokens)
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					// The best call: on a shared machine the others include time slices
					// spent on other processes.
					b.ReportMetric(flops/best.Seconds()/1e9, "best-GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkGEMMTile times the micro-kernels alone on one thread with L1/L2-resident operands
// (k = 576), in GFLOP/s.
func BenchmarkGEMMTile(b *testing.B) {
	r := rand.New(rand.NewSource(6))
	const k = 576
	w := normals(r, gemmRows*k)
	for _, ks := range allKernels() {
		tk := gemmTileKernels(ks)
		for _, c := range []struct {
			width int
			fn    func(w []float32, ldw int, xt []float32, k int, acc []float32)
		}{{gemmWide, tk.tile16}, {gemmNarrow, tk.tile8}} {
			xt := normals(r, c.width*k)
			acc := make([]float32, gemmRows*c.width)
			b.Run(fmt.Sprintf("%s/width=%d", ks.name, c.width), func(b *testing.B) {
				for b.Loop() {
					c.fn(w, k, xt, k, acc)
				}
				flops := 2 * float64(gemmRows*c.width*k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkFewTokens times products of a few tokens, the decode steps of small batches and
// speculative verify steps, with 16 matrices of 2048x1536 (53 to 100 MB: beyond the caches,
// as a model's weights are), on 2 threads: where the matrix-vector path gives way to the
// GEMM (gemmMinTokens, q0MinTokens). best-us is the fastest pass over the 16.
func BenchmarkFewTokens(b *testing.B) {
	r := rand.New(rand.NewSource(5))
	p := testPool(2)
	defer p.Close()
	for _, wt := range []quant.Type{quant.F16, quant.BF16, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		ws := make([]Weight, 16)
		for i := range ws {
			ws[i] = benchWeight(r, wt, 2048, 1536)
		}
		for _, tokens := range []int{1, 2, 3, 5, 6, 8, 12, 16, 32, 47} {
			b.Run(fmt.Sprintf("%s/tokens=%d", wt, tokens), func(b *testing.B) {
				x := normals(r, tokens*1536)
				out := make([]float32, tokens*2048)
				best := time.Duration(1 << 62)
				for b.Loop() {
					start := time.Now()
					for _, w := range ws {
						if err := MatMul(p, out, w, x, tokens); err != nil {
							b.Fatal(err)
						}
					}
					best = min(best, time.Since(start))
				}
				b.ReportMetric(float64(best.Microseconds()), "best-us")
			})
		}
	}
}
