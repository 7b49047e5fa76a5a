package cpu

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestAttentionChunks runs attention with small fold chunks, so that short contexts span
// many of them, and checks that every path gives the same bits: one to three threads
// (whole-tile units, per-head units, flash-decoding chunk units), and each token run alone
// as a decode step rather than inside its prefill chunk. All must also agree with the
// naive attention.
func TestAttentionChunks(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	const blockSize, hd, numBlocks = 4, 16, 40
	pools := testPools(t, 1, 2, 3)
	for _, c := range []struct{ kvHeads, ratio, start, n, chunk int }{
		{1, 4, 100, 1, 4}, {2, 2, 63, 1, 8}, {1, 1, 37, 3, 4}, {2, 4, 150, 2, 16}, {1, 2, 0, 1, 4},
		{4, 1, 9, 5, 8}, {2, 3, 40, 20, 12}, {1, 4, 120, 35, 32},
	} {
		heads := c.kvHeads * c.ratio
		kv, err := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, hd, quant.F32)
		if err != nil {
			t.Fatal(err)
		}
		table, slots, k, v := randomContext(r, numBlocks, blockSize, c.kvHeads*hd, c.start+c.n)
		if err := WriteKV(kv, k, v, slots); err != nil {
			t.Fatal(err)
		}
		positions := make([]int32, c.n)
		for i := range positions {
			positions[i] = int32(c.start + i)
		}
		q := normals(r, c.n*heads*hd)
		scale := float32(1 / math.Sqrt(hd))
		want := naiveAttention(q, c.n, heads, kv, table, positions, scale)
		run := func(p *Pool, out, q []float32, positions []int32) {
			a := attnJob{k: p.kern, out: out, q: q, nTokens: len(positions), heads: heads, kv: kv,
				blockTable: table, ctxIndex: positions, scale: scale, chunk: c.chunk}
			a.run(p, int(slices.Max(positions)))
		}
		ref := map[string][]float32{} // per kernel set
		for _, p := range pools {
			out := make([]float32, len(q))
			run(p, out, q, positions)
			for i := range out {
				if math.Abs(float64(out[i])-want[i]) > 1e-5 {
					t.Fatalf("%+v %s/%d: out[%d] = %g want %g", c, p.KernelSet(), p.Threads(), i, out[i], want[i])
				}
			}
			if ref[p.KernelSet()] == nil {
				ref[p.KernelSet()] = out
			} else if !slices.Equal(out, ref[p.KernelSet()]) {
				t.Fatalf("%+v %s: %d threads give other bits than 1", c, p.KernelSet(), p.Threads())
			}
			row := heads * hd
			for tok := range c.n {
				one := make([]float32, row)
				run(p, one, q[tok*row:(tok+1)*row], positions[tok:tok+1])
				if !slices.Equal(one, out[tok*row:(tok+1)*row]) {
					t.Fatalf("%+v %s/%d: token %d alone gives other bits than in its chunk", c, p.KernelSet(), p.Threads(), tok)
				}
			}
		}
	}
}
