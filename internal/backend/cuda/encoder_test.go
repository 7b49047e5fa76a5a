package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// testEncoder checks the encoder kernels that jina-bert-v2 adds against float64 twins:
// the gated exact GELU, and bidirectional attention with ALiBi's bias over sequences of 5,
// 300 and 1 tokens with 6 heads (slopes of a head count that is no power of two) and, as
// the bias-free case, with maxBias 0.
func testEncoder(t *testing.T, e *env, r *rand.Rand) {
	const n = 5000
	gv, uv := randVals(r, n, 4), randVals(r, n, 2)
	g, _ := e.upload(t, F32, gv)
	u, _ := e.upload(t, F32, uv)
	out := e.poisoned(t, F32, n)
	e.do(t, func() error { return e.ops.GELUGLU(out, g, u) })
	want := make([]float64, n)
	for i := range want {
		x := float64(gv[i])
		want[i] = 0.5 * x * math.Erfc(-x/math.Sqrt2) * float64(uv[i])
	}
	check(t, "gelu glu", F32, e.download(t, out), want)

	const heads, hd = 6, 32
	lens := []int{5, 300, 1}
	starts := []int32{0}
	for _, l := range lens {
		starts = append(starts, starts[len(starts)-1]+int32(l))
	}
	tokens, width := int(starts[len(lens)]), heads*hd
	qv, kv, vv := randVals(r, tokens*width, 1), randVals(r, tokens*width, 1), randVals(r, tokens*width, 1)
	q, _ := e.upload(t, F32, qv)
	k, _ := e.upload(t, F32, kv)
	v, _ := e.upload(t, F32, vv)
	qs := e.uploadI32(t, starts)
	scale := 1 / math.Sqrt(hd)
	for _, maxBias := range []float64{0, 8} {
		// ALiBi's slopes (Press et al.) for 6 heads: the powers of 2^(-8/4) for the largest
		// power of two, 4, then the odd powers of 2^(-8/8).
		slopes := make([]float64, heads)
		if maxBias > 0 {
			slopes = []float64{1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256, 1.0 / 2, 1.0 / 8}
		}
		want := make([]float64, tokens*width)
		for s := range lens {
			lo, hi := int(starts[s]), int(starts[s+1])
			for tk := lo; tk < hi; tk++ {
				for h := range heads {
					sc := make([]float64, hi-lo)
					best := math.Inf(-1)
					for j := lo; j < hi; j++ {
						for x := range hd {
							sc[j-lo] += float64(qv[tk*width+h*hd+x]) * float64(kv[j*width+h*hd+x])
						}
						sc[j-lo] = sc[j-lo]*scale - slopes[h]*math.Abs(float64(tk-j))
						best = math.Max(best, sc[j-lo])
					}
					var z float64
					for j := range sc {
						sc[j] = math.Exp(sc[j] - best)
						z += sc[j]
					}
					for j := lo; j < hi; j++ {
						for x := range hd {
							want[tk*width+h*hd+x] += sc[j-lo] / z * float64(vv[j*width+h*hd+x])
						}
					}
				}
			}
		}
		o := e.poisoned(t, F32, tokens*width)
		e.do(t, func() error {
			return e.ops.BidirectionalAttention(o, q, k, v, qs, tokens, len(lens), 300, heads, hd, float32(scale), float32(maxBias))
		})
		check(t, "bidirectional attention (alibi max bias "+map[bool]string{true: "8", false: "0"}[maxBias > 0]+")", F32, e.download(t, o), want)
	}
}
