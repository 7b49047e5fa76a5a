package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// attnWindowRef computes attention of one query head at context index pos over the
// positions max(0, pos-window+1)..pos (all of 0..pos for window 0), each score scale·q·k
// soft-capped as softcap·tanh(score/softcap) when softcap > 0, in float64.
func attnWindowRef(q []float32, kh, vh []float32, bt []int32, pos, window, bs, kvHeads, kvh, hd int, scale, softcap float64) []float64 {
	lo := 0
	if window > 0 {
		lo = max(0, pos-window+1)
	}
	scores := make([]float64, pos+1)
	m := math.Inf(-1)
	for p := lo; p <= pos; p++ {
		off := ((int(bt[p/bs])*bs+p%bs)*kvHeads + kvh) * hd
		var d float64
		for i := range hd {
			d += float64(q[i]) * float64(kh[off+i])
		}
		d *= scale
		if softcap > 0 {
			d = softcap * math.Tanh(d/softcap)
		}
		scores[p] = d
		m = math.Max(m, d)
	}
	out := make([]float64, hd)
	var l float64
	for p := lo; p <= pos; p++ {
		w := math.Exp(scores[p] - m)
		l += w
		off := ((int(bt[p/bs])*bs+p%bs)*kvHeads + kvh) * hd
		for i := range hd {
			out[i] += w * float64(vh[off+i])
		}
	}
	for i := range out {
		out[i] /= l
	}
	return out
}

// testVariants checks the ops of the architectures beyond the Llama family against their
// float64 twins: windowed and soft-capped attention (prefill chunks, prefix-cache hits and
// decode tokens in one step, every cache type), GeGLU, Scale, and the split RMSNorm's two
// halves.
func testVariants(t *testing.T, e *env, r *rand.Rand) {
	const heads, kvHeads, bs, hd = 8, 2, 16, 64
	type seqSpec struct{ prefix, n int }
	specs := []seqSpec{{0, 37}, {50, 20}, {0, 1}, {129, 1}, {3, 150}}
	maxBlocks, total, maxQ := 0, 0, 0
	var starts, ctxs []int32
	for _, s := range specs {
		starts = append(starts, int32(total))
		ctxs = append(ctxs, int32(s.prefix+s.n))
		total += s.n
		maxQ = max(maxQ, s.n)
		maxBlocks = max(maxBlocks, (s.prefix+s.n+bs-1)/bs)
	}
	starts = append(starts, int32(total))
	for _, dt := range floatTypes {
		numBlocks := len(specs) * maxBlocks
		cache, kh, vh := pagedCache(t, e, r, dt, numBlocks, bs, kvHeads, hd)
		bt := blockTables(r, len(specs), maxBlocks, numBlocks)
		qv := randVals(r, total*heads*hd, 3)
		qb, _ := e.upload(t, F32, qv)
		scale := 1 / math.Sqrt(hd)
		for _, v := range []struct {
			window  int
			softcap float32
		}{{7, 0}, {40, 0}, {0, 2}, {20, 3}} {
			var want []float64
			for si, s := range specs {
				for i := range s.n {
					tok := int(starts[si]) + i
					for h := range heads {
						want = append(want, attnWindowRef(qv[(tok*heads+h)*hd:][:hd], kh, vh, bt[si*maxBlocks:], s.prefix+i, v.window,
							bs, kvHeads, h/(heads/kvHeads), hd, scale, float64(v.softcap))...)
					}
				}
			}
			out := e.poisoned(t, F32, total*heads*hd)
			args := PrefillArgs{Out: out, OutStride: heads * hd, Q: qb, QStride: heads * hd, Tokens: total, Seqs: len(specs), Heads: heads,
				Cache: cache, SeqStarts: e.uploadI32(t, starts), ContextLens: e.uploadI32(t, ctxs), MaxQueryLen: maxQ,
				BlockTables: e.uploadI32(t, bt), MaxBlocks: maxBlocks, Scale: float32(scale)}
			e.do(t, func() error { return e.ops.AttentionWindow(args, v.window, v.softcap) })
			tl := F32
			if dt != F32 {
				tl = F16
			}
			check(t, fmt.Sprintf("attention window=%d softcap=%g cache=%s", v.window, v.softcap, dt), tl, e.download(t, out), want)
		}
	}

	const n = 5000
	gv, uv := randVals(r, n, 4), randVals(r, n, 2)
	g, _ := e.upload(t, F32, gv)
	u, _ := e.upload(t, F32, uv)
	out := e.poisoned(t, F32, n)
	e.do(t, func() error { return e.ops.GeGLU(out, g, u, n) })
	want := make([]float64, n)
	for i := range want {
		x := float64(gv[i])
		want[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * float64(uv[i])
	}
	check(t, "geglu", F32, e.download(t, out), want)
	e.do(t, func() error { return e.ops.Scale(u, 1.5, n) })
	for i := range want {
		want[i] = 1.5 * float64(uv[i])
	}
	check(t, "scale", F32, e.download(t, u), want)

	// Sum of squares and the split RMSNorm: rows of 3 x 100 values, normalized by the
	// squares of rows three times as long.
	const rows, dim = 7, 100
	xv, wv := randVals(r, rows*dim, 2), randVals(r, dim, 1)
	x, _ := e.upload(t, F32, xv)
	w, _ := e.upload(t, F32, wv)
	ss := e.poisoned(t, F32, rows)
	e.do(t, func() error { return e.ops.SumSquares(ss, x, rows, dim) })
	wantSS := make([]float64, rows)
	for i := range rows {
		for _, v := range xv[i*dim : (i+1)*dim] {
			wantSS[i] += float64(v) * float64(v)
		}
	}
	check(t, "sum squares", F32, e.download(t, ss), wantSS)
	e.do(t, func() error { return e.ops.RMSNormSplit(x, ss, w, rows, dim, 3*dim, 1e-6) })
	wantX := make([]float64, rows*dim)
	for i := range rows {
		inv := 1 / math.Sqrt(wantSS[i]/(3*dim)+1e-6)
		for c := range dim {
			wantX[i*dim+c] = float64(xv[i*dim+c]) * inv * float64(wv[c])
		}
	}
	check(t, "rmsnorm split", F32, e.download(t, x), wantX)
}
