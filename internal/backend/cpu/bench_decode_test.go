package cpu

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// decodeBenchBytes is the least total weight size the decode benchmark cycles through: well
// beyond the last-level cache, so every matrix-vector product streams its weights from DRAM.
const decodeBenchBytes = 96 << 20

// decodeWeights returns copies of one random rows x cols weight of type wt totalling at
// least decodeBenchBytes.
func decodeWeights(r *rand.Rand, wt quant.Type, rows, cols int) []Weight {
	w0 := benchWeight(r, wt, rows, cols)
	n := max(2, (decodeBenchBytes+len(w0.Data)-1)/len(w0.Data))
	ws := []Weight{w0}
	for range n - 1 {
		w := w0
		w.Data = append([]byte(nil), w0.Data...)
		ws = append(ws, w)
	}
	return ws
}

// BenchmarkDecode times matrix-vector products (one token) over 5632x2048 weights of every
// type, cycling through more weight bytes than the caches hold, and reports the weight
// bandwidth of the best pass (one product with every copy) beside the best ProbeBandwidth
// pass, the two kinds of passes alternating, and their ratio. Best-of on both sides keeps
// the ratio steady on a busy machine; run it with e.g. -benchtime 20x.
func BenchmarkDecode(b *testing.B) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K}
	const rows, cols = 5632, 2048
	r := rand.New(rand.NewSource(7))
	p := testPool(0)
	defer p.Close()
	for _, wt := range types {
		b.Run(wt.String(), func(b *testing.B) {
			ws := decodeWeights(r, wt, rows, cols)
			x := normals(r, cols)
			out := make([]float32, rows)
			probe := newBandwidthProbe(128 << 20)
			probe.pass(p)
			runtime.GC() // collect the previous type's weights now, not while timing
			best, bestProbe := time.Duration(1<<62), time.Duration(1<<62)
			for b.Loop() {
				bestProbe = min(bestProbe, probe.pass(p))
				start := time.Now()
				for _, w := range ws {
					if err := MatMul(p, out, w, x, 1); err != nil {
						b.Fatal(err)
					}
				}
				best = min(best, time.Since(start))
			}
			gbs := float64(len(ws)*len(ws[0].Data)) / best.Seconds() / 1e9
			probeGBs := probe.gbs(bestProbe)
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(probeGBs, "probe-GB/s")
			b.ReportMetric(gbs/probeGBs, "probe-ratio")
		})
	}
}

// BenchmarkPrefill times 128-token products with a 2048x5632 weight and reports GFLOP/s,
// by the wall clock and per CPU-second times the threads.
func BenchmarkPrefill(b *testing.B) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K}
	const rows, cols, tokens = 2048, 5632, 128
	r := rand.New(rand.NewSource(8))
	p := testPool(0)
	defer p.Close()
	for _, wt := range types {
		b.Run(wt.String(), func(b *testing.B) {
			w := benchWeight(r, wt, rows, cols)
			x := normals(r, tokens*cols)
			out := make([]float32, tokens*rows)
			var cpu time.Duration
			for b.Loop() {
				c0 := processCPU()
				if err := MatMul(p, out, w, x, tokens); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - c0
			}
			flops := 2 * float64(rows) * float64(cols) * tokens * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if cpu > 0 {
				// What the threads would reach on an idle machine: flops per CPU-second
				// times the threads (meaningful when other processes share the cores).
				b.ReportMetric(flops/cpu.Seconds()/1e9*float64(p.Threads()), "GFLOP/s-idle")
			}
		})
	}
}

// BenchmarkPoolRun times the fixed cost of one Run (waking the workers and waiting for
// them) with trivial work, and one small decode product (2048x256 Q8_0, L2-resident).
func BenchmarkPoolRun(b *testing.B) {
	p := testPool(0)
	defer p.Close()
	var sink [64]int
	b.Run("empty", func(b *testing.B) {
		for b.Loop() {
			p.Run(64, func(start, end int) { sink[start%64] += end - start })
		}
	})
	b.Run("matvec-256x2048-Q8_0", func(b *testing.B) {
		r := rand.New(rand.NewSource(9))
		w := benchWeight(r, quant.Q8_0, 256, 2048)
		x := normals(r, 2048)
		out := make([]float32, 256)
		for b.Loop() {
			if err := MatMul(p, out, w, x, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodePages is BenchmarkDecode's one-token products (a 5632x2048 weight and a
// 2048x5632 one, the shapes of tinyllama's gate and down projections) with the weights in 4 KiB
// pages (Go memory the kernel is told not to back with huge pages, as a model file's
// mapping is) and in a WeightArena, the two alternating pass by pass: it reports the
// bandwidth of the best product of each (robust to a shared machine) and their ratio.
func BenchmarkDecodePages(b *testing.B) {
	r := rand.New(rand.NewSource(7))
	p := testPool(0)
	defer p.Close()
	for _, shape := range [][2]int{{5632, 2048}, {2048, 5632}} {
		for _, wt := range []quant.Type{quant.BF16, quant.Q8_0, quant.Q4_0} {
			rows, cols := shape[0], shape[1]
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, wt), func(b *testing.B) {
				small := decodeWeights(r, wt, rows, cols)
				var arena WeightArena
				huge := make([]Weight, len(small))
				for i, w := range small {
					adviseSmallPages(w.Data)
					huge[i] = w
					huge[i].Data, _ = arena.Copy(p, w.Data)
				}
				x := normals(r, cols)
				out := make([]float32, rows)
				runtime.GC()
				pass := func(ws []Weight) time.Duration {
					best := time.Duration(1 << 62)
					for _, w := range ws {
						start := time.Now()
						if err := MatMul(p, out, w, x, 1); err != nil {
							b.Fatal(err)
						}
						best = min(best, time.Since(start))
					}
					return best
				}
				bestSmall, bestHuge := time.Duration(1<<62), time.Duration(1<<62)
				for b.Loop() {
					bestSmall = min(bestSmall, pass(small))
					bestHuge = min(bestHuge, pass(huge))
				}
				bytes := float64(len(small[0].Data))
				b.ReportMetric(bytes/bestSmall.Seconds()/1e9, "small-GB/s")
				b.ReportMetric(bytes/bestHuge.Seconds()/1e9, "huge-GB/s")
				b.ReportMetric(bestSmall.Seconds()/bestHuge.Seconds(), "huge/small")
			})
		}
	}
}
