package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestAttentionSplit forces the split-K (flash-decoding) path with small chunks and checks
// it against the naive attention, for decode steps and short chunks, over every kernel set.
func TestAttentionSplit(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	const blockSize, hd, numBlocks = 4, 16, 40
	pools := testPools(t, 2, 3)
	for _, c := range []struct{ kvHeads, ratio, start, n, minSplit int }{
		{1, 4, 100, 1, 1}, {2, 2, 63, 1, 8}, {1, 1, 37, 3, 4}, {2, 4, 150, 2, 16}, {1, 2, 0, 1, 1}, {4, 1, 9, 5, 2},
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
		for _, p := range pools {
			out := make([]float32, len(q))
			a := attnJob{k: p.kern, out: out, q: q, nTokens: c.n, heads: heads, kv: kv,
				blockTable: table, positions: positions, scale: scale}
			a.run(p, c.start+c.n-1, c.minSplit)
			for i := range out {
				if math.Abs(float64(out[i])-want[i]) > 1e-5 {
					t.Fatalf("%+v %s/%d: out[%d] = %g want %g", c, p.KernelSet(), p.Threads(), i, out[i], want[i])
				}
			}
		}
	}
}
