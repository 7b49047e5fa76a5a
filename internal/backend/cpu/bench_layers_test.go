package cpu

import (
	"math/rand"
	"runtime"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// BenchmarkDecodeLayers times the matrix-vector products of one decode step of a
// smollm2-135m-shaped model (30 layers of q, k, v, o, gate+up and down products, then the
// 49152-row output projection) with nothing between them, and reports their weight
// bandwidth beside the best probe pass, the two alternating, and their ratio: the ceiling
// the model's decode ratio can reach when the ops between products cost nothing.
func BenchmarkDecodeLayers(b *testing.B) {
	const dim, kvDim, ffn, vocab, layers = 576, 192, 1536, 49152, 30
	for _, wt := range []quant.Type{quant.Q8_0, quant.BF16} {
		b.Run(wt.String(), func(b *testing.B) {
			r := rand.New(rand.NewSource(11))
			p := testPool(0)
			defer p.Close()
			type layer struct{ q, k, v, o, gate, up, down Weight }
			ls := make([]layer, layers)
			bytes := 0
			var arena WeightArena // the weights in huge pages, as the CPU backend holds them
			weight := func(rows, cols int) Weight {
				w := benchWeight(r, wt, rows, cols)
				w.Data, _ = arena.Copy(p, w.Data)
				return w
			}
			for i := range ls {
				l := layer{q: weight(dim, dim), k: weight(kvDim, dim), v: weight(kvDim, dim),
					o: weight(dim, dim), gate: weight(ffn, dim), up: weight(ffn, dim), down: weight(dim, ffn)}
				for _, w := range []Weight{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
					bytes += len(w.Data)
				}
				ls[i] = l
			}
			out := weight(vocab, dim)
			bytes += len(out.Data)
			x, h := normals(r, dim), normals(r, ffn)
			q, k, v := make([]float32, dim), make([]float32, kvDim), make([]float32, kvDim)
			o, g, logits := make([]float32, dim), make([]float32, ffn), make([]float32, vocab)
			probe := newBandwidthProbe(128 << 20)
			probe.pass(p)
			runtime.GC()
			best, bestProbe := time.Duration(1<<62), time.Duration(1<<62)
			for b.Loop() {
				bestProbe = min(bestProbe, probe.pass(p))
				start := time.Now()
				for _, l := range ls {
					must(b, MatMuls(p, [][]float32{q, k, v}, []Weight{l.q, l.k, l.v}, x, 1))
					must(b, MatMul(p, o, l.o, q, 1))
					must(b, MatMulSwiGLU(p, g, l.gate, l.up, x, 1))
					must(b, MatMul(p, o, l.down, h, 1))
				}
				must(b, MatMul(p, logits, out, x, 1))
				best = min(best, time.Since(start))
			}
			gbs := float64(bytes) / best.Seconds() / 1e9
			probeGBs := probe.gbs(bestProbe)
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(probeGBs, "probe-GB/s")
			b.ReportMetric(gbs/probeGBs, "probe-ratio")
		})
	}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
