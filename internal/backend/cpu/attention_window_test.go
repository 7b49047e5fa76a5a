package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// naiveAttentionWith is the reference twin of AttentionWith: a float64 softmax over each
// token's window of positions, scores soft-capped as tanh in float64.
func naiveAttentionWith(q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable, positions []int32, opt AttnOptions) []float64 {
	hd := kv.HeadDim
	group := heads / kv.KVHeads
	out := make([]float64, nTokens*heads*hd)
	for t := range nTokens {
		lo := 0
		if opt.Window > 0 {
			lo = max(0, int(positions[t])-opt.Window+1)
		}
		for h := range heads {
			kvh := h / group
			qv := q[(t*heads+h)*hd:][:hd]
			var ps []int
			var s []float64
			for j := lo; j <= int(positions[t]); j++ {
				slot := int(blockTable[j/kv.BlockSize])*kv.BlockSize + j%kv.BlockSize
				k := kv.K[(slot*kv.KVHeads+kvh)*hd:][:hd]
				var d float64
				for i := range hd {
					d += float64(qv[i]) * float64(k[i])
				}
				d *= float64(opt.Scale)
				if opt.Softcap > 0 {
					d = float64(opt.Softcap) * math.Tanh(d/float64(opt.Softcap))
				}
				ps, s = append(ps, slot), append(s, d)
			}
			m := math.Inf(-1)
			for _, v := range s {
				m = math.Max(m, v)
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			o := out[(t*heads+h)*hd:][:hd]
			for j, slot := range ps {
				v := kv.V[(slot*kv.KVHeads+kvh)*hd:][:hd]
				for i := range hd {
					o[i] += s[j] / sum * float64(v[i])
				}
			}
		}
	}
	return out
}

// TestAttentionWindowSoftcap: windowed and soft-capped attention, over prefill chunks and
// decode steps whose windows start inside, at the edge of and before the cached blocks,
// with the chunked (flash-decoding) path forced by a short chunk, matches the float64
// twin; and a window at least as long as the context changes nothing.
func TestAttentionWindowSoftcap(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	const blockSize, hd, numBlocks = 4, 16, 48
	pools := testPools(t, 1, 2)
	for _, opt := range []AttnOptions{
		{Scale: 0.25, Window: 1}, {Scale: 0.25, Window: 5}, {Scale: 0.25, Window: 8},
		{Scale: 0.25, Softcap: 0.5}, {Scale: 0.3, Window: 7, Softcap: 2},
	} {
		for _, chunk := range []struct{ start, n int }{{0, 1}, {0, 9}, {5, 20}, {37, 1}, {150, 1}, {40, 19}} {
			kvHeads, heads := 2, 4
			kv, err := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, quant.F32)
			if err != nil {
				t.Fatal(err)
			}
			row := kvHeads * hd
			table, slots, k, v := randomContext(r, numBlocks, blockSize, row, chunk.start+chunk.n)
			if err := WriteKV(kv, k, v, slots); err != nil {
				t.Fatal(err)
			}
			positions := make([]int32, chunk.n)
			for i := range positions {
				positions[i] = int32(chunk.start + i)
			}
			q := normals(r, chunk.n*heads*hd)
			for i := range q {
				q[i] *= 4 // scores large enough for the cap to bite
			}
			want := naiveAttentionWith(q, chunk.n, heads, kv, table, positions, opt)
			for _, p := range pools {
				for _, c := range []int{attnChunkPositions, blockSize} {
					out := make([]float32, len(q))
					a := attnJob{k: p.kern, out: out, q: q, nTokens: chunk.n, heads: heads, kv: kv, blockTable: table,
						ctxIndex: positions, scale: opt.Scale, window: opt.Window, softcap: opt.Softcap, chunk: c}
					maxPos, err := checkAttention(out, q, chunk.n, heads, kv, table, positions)
					if err != nil {
						t.Fatal(err)
					}
					a.run(p, maxPos)
					for i := range out {
						if math.Abs(float64(out[i])-want[i]) > 1e-5 {
							t.Fatalf("%+v chunk %+v %s/%d chunk size %d: out[%d] = %g want %g", opt, chunk, p.KernelSet(), p.Threads(), c, i, out[i], want[i])
						}
					}
				}
			}
			if opt.Softcap == 0 {
				// A window covering the whole context is plain causal attention, bit for bit.
				p := pools[0]
				wide, plain := make([]float32, len(q)), make([]float32, len(q))
				if err := AttentionWith(p, wide, q, chunk.n, heads, kv, table, positions, AttnOptions{Scale: opt.Scale, Window: chunk.start + chunk.n}); err != nil {
					t.Fatal(err)
				}
				if err := Attention(p, plain, q, chunk.n, heads, kv, table, positions, opt.Scale); err != nil {
					t.Fatal(err)
				}
				for i := range wide {
					if wide[i] != plain[i] {
						t.Fatalf("chunk %+v: a window over the whole context gives %g at %d, plain attention %g", chunk, wide[i], i, plain[i])
					}
				}
			}
		}
	}
}

// TestGeGLU checks GeGLU against PyTorch's gelu(approximate="tanh") values, taken from the
// formula's definition at points where it is known in closed form or by symmetry.
func TestGeGLU(t *testing.T) {
	p := testPool(2)
	defer p.Close()
	n := 3000
	r := rand.New(rand.NewSource(3))
	gate, up := normals(r, n), normals(r, n)
	gate[0], gate[1] = 0, 30 // gelu(0) = 0; gelu(x) = x for large x
	out := make([]float32, n)
	if err := GeGLU(p, out, gate, up); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		x := float64(gate[i])
		inner := math.Sqrt(2/math.Pi) * (x + 0.044715*x*x*x)
		want := 0.5 * x * (1 + math.Tanh(inner)) * float64(up[i])
		if math.Abs(float64(out[i])-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Fatalf("out[%d] = %g, want %g", i, out[i], want)
		}
	}
	if out[0] != 0 || out[1] != 30*up[1] {
		t.Errorf("gelu(0)*u = %g, gelu(30)*u = %g want 0 and %g", out[0], out[1], 30*up[1])
	}
	// gelu(x) - gelu(-x) = x.
	for _, x := range []float64{0.1, 0.7, 1.3, 2.9} {
		if d := GeluTanh(x) - GeluTanh(-x); math.Abs(d-x) > 1e-12 {
			t.Errorf("gelu(%g) - gelu(-%g) = %g", x, x, d)
		}
	}
	if err := GeGLU(p, out[:2], gate, up); err == nil {
		t.Error("mismatched lengths accepted")
	}
}

// TestRMSNormSplit: a row normalized in two halves, their squares summed and added, gives
// the float64 RMSNorm of the whole row.
func TestRMSNormSplit(t *testing.T) {
	p := testPool(2)
	defer p.Close()
	const rows, dim = 5, 96
	r := rand.New(rand.NewSource(4))
	x, w := normals(r, rows*dim), normals(r, dim)
	halves := [2][]float32{make([]float32, rows*dim/2), make([]float32, rows*dim/2)}
	for row := range rows {
		for h := range 2 {
			copy(halves[h][row*dim/2:(row+1)*dim/2], x[row*dim+h*dim/2:row*dim+(h+1)*dim/2])
		}
	}
	sums := [2][]float32{make([]float32, rows), make([]float32, rows)}
	for h := range 2 {
		if err := SumSquares(p, sums[h], halves[h], dim/2); err != nil {
			t.Fatal(err)
		}
	}
	total := make([]float32, rows)
	for i := range total {
		total[i] = sums[0][i] + sums[1][i]
	}
	for h := range 2 {
		if err := RMSNormSplit(p, halves[h], total, w[h*dim/2:(h+1)*dim/2], dim, 1e-6); err != nil {
			t.Fatal(err)
		}
	}
	for row := range rows {
		var ss float64
		for _, v := range x[row*dim : (row+1)*dim] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/dim+1e-6)
		for c := range dim {
			want := float64(x[row*dim+c]) * inv * float64(w[c])
			got := halves[c/(dim/2)][row*dim/2+c%(dim/2)]
			if math.Abs(float64(got)-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("row %d col %d: %g, want %g", row, c, got, want)
			}
		}
	}
	if err := RMSNormSplit(p, halves[0], total[:2], w[:dim/2], dim, 1e-6); err == nil {
		t.Error("mismatched rows accepted")
	}
}
