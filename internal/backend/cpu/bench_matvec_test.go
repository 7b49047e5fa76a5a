package cpu

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// BenchmarkMatVecCompute times one-token products on one thread with weights small enough to
// stay in L2 (about 256 KiB), so that it measures the kernels' compute rate in weight bytes per
// second rather than the memory system: decode can only reach the bandwidth bound if this
// rate is well above a core's share of DRAM bandwidth.
func BenchmarkMatVecCompute(b *testing.B) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.FP8}
	r := rand.New(rand.NewSource(11))
	for _, ks := range KernelSets() {
		p, err := NewPoolKernels(1, ks)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for _, wt := range types {
			for _, cols := range []int{768, 2048} {
				b.Run(fmt.Sprintf("%s/%s/cols=%d", ks, wt, cols), func(b *testing.B) {
					rb, _ := wt.RowBytes(cols)
					w := benchWeight(r, wt, max(16, (256<<10)/rb&^3), cols)
					x := normals(r, cols)
					out := make([]float32, w.Rows)
					best := time.Duration(1 << 62)
					for b.Loop() {
						start := time.Now()
						if err := MatMul(p, out, w, x, 1); err != nil {
							b.Fatal(err)
						}
						best = min(best, time.Since(start))
					}
					// The best call: on a shared machine the others include time slices
					// spent on other processes.
					b.ReportMetric(float64(len(w.Data))/best.Seconds()/1e9, "best-GB/s")
				})
			}
		}
	}
}

// BenchmarkFewTokensCompute times products of 1 to 8 tokens (decode, speculative verify
// steps of 1+k) on one thread with F32, F16 and BF16 weights of 512 columns small enough to
// stay in L2 (about 256 KiB), so that it measures the arithmetic rate of the few-token
// kernels (best-GMAC/s, multiply-adds of weights by activations per second) rather than
// the memory system: a verify step of 1+k tokens reads the weights once, and costs about
// a decode step where this rate at 1+k tokens stays well above a core's share of
// bandwidth times 1+k.
func BenchmarkFewTokensCompute(b *testing.B) {
	r := rand.New(rand.NewSource(12))
	p := testPool(1)
	defer p.Close()
	const cols = 512
	for _, wt := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		rb, _ := wt.RowBytes(cols)
		w := benchWeight(r, wt, (256<<10)/rb&^3, cols)
		for _, tokens := range []int{1, 2, 3, 4, 5, 8, 12, 16, 32, 47} {
			b.Run(fmt.Sprintf("%s/tokens=%d", wt, tokens), func(b *testing.B) {
				x := normals(r, tokens*cols)
				out := make([]float32, tokens*w.Rows)
				best := time.Duration(1 << 62)
				for b.Loop() {
					start := time.Now()
					if err := MatMul(p, out, w, x, tokens); err != nil {
						b.Fatal(err)
					}
					best = min(best, time.Since(start))
				}
				b.ReportMetric(float64(w.Rows*cols*tokens)/best.Seconds()/1e9, "best-GMAC/s")
			})
		}
	}
}

// BenchmarkRows8Kernel times the 8-row quantized kernels alone on L1-resident rows of 2048
// values, in weight bytes per second.
func BenchmarkRows8Kernel(b *testing.B) {
	r := rand.New(rand.NewSource(12))
	for _, c := range rows8Cases {
		for _, k := range allKernels() {
			b.Run(c.name+"/"+k.name, func(b *testing.B) {
				const nb = 64
				bb := c.wt.BlockBytes()
				w := randWeights(r, c.wt, rows8*nb, modeRandom)
				x := randActivations(r, quant.Q8_0, nb, modeRandom)
				out := make([]float32, rows8)
				kern := c.kernel(k)
				best := time.Duration(1 << 62)
				for b.Loop() {
					start := time.Now()
					for range 16 {
						kern(w, nb*bb, x, nb, out)
					}
					best = min(best, time.Since(start))
				}
				b.ReportMetric(float64(16*len(w))/best.Seconds()/1e9, "best-GB/s")
			})
		}
	}
}

// BenchmarkDecodeBest is BenchmarkDecode on 1 and 2 threads with the best single product
// timed (robust to a shared machine): the weight bandwidth the cores reach from DRAM, beside
// a probe on as many threads. Filter it with e.g. -bench 'DecodeBest/2/Q4_0'.
func BenchmarkDecodeBest(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprint(threads), func(b *testing.B) { benchDecodeBest(b, threads) })
	}
}

func benchDecodeBest(b *testing.B, threads int) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K}
	const rows, cols = 5632, 2048
	r := rand.New(rand.NewSource(7))
	p := testPool(threads)
	defer p.Close()
	probe := newBandwidthProbe(128 << 20)
	for _, wt := range types {
		b.Run(wt.String(), func(b *testing.B) {
			ws := decodeWeights(r, wt, rows, cols)
			x := normals(r, cols)
			out := make([]float32, rows)
			best, bestProbe := time.Duration(1<<62), time.Duration(1<<62)
			for b.Loop() {
				bestProbe = min(bestProbe, probe.pass(p))
				for _, w := range ws {
					start := time.Now()
					if err := MatMul(p, out, w, x, 1); err != nil {
						b.Fatal(err)
					}
					best = min(best, time.Since(start))
				}
			}
			gbs := float64(len(ws[0].Data)) / best.Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(probe.gbs(bestProbe), "probe-GB/s")
			b.ReportMetric(gbs/probe.gbs(bestProbe), "probe-ratio")
		})
	}
}
