package cpu

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestAttentionBatch runs several sequences (decodes and prefill chunks, disjoint blocks of
// one cache layer) through AttentionBatch and checks every output against the naive
// attention, over every kernel set, for batches that take the one-loop path and the
// per-sequence fallback.
func TestAttentionBatch(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	const blockSize, hd, numBlocks, kvHeads, heads = 4, 16, 200, 2, 6
	pools := testPools(t, 1, 2)
	for _, chunks := range [][]struct{ start, n int }{
		{{9, 1}},
		{{3, 1}, {0, 1}},
		{{30, 1}, {12, 1}, {5, 1}, {0, 1}, {77, 1}, {40, 1}},
		{{0, 18}, {21, 1}, {8, 5}, {50, 1}, {0, 33}},
	} {
		kv, err := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, quant.F32)
		if err != nil {
			t.Fatal(err)
		}
		perm := r.Perm(numBlocks)
		scale := float32(1 / math.Sqrt(hd))
		seqs := make([]AttentionSeq, len(chunks))
		wants := make([][]float64, len(chunks))
		for i, c := range chunks {
			total := c.start + c.n
			table := make([]int32, (total+blockSize-1)/blockSize)
			for j := range table {
				table[j], perm = int32(perm[0]), perm[1:]
			}
			row := kvHeads * hd
			slots := make([]int32, total)
			for p := range total {
				slots[p] = table[p/blockSize]*blockSize + int32(p%blockSize)
			}
			if err := WriteKV(kv, normals(r, total*row), normals(r, total*row), slots); err != nil {
				t.Fatal(err)
			}
			positions := make([]int32, c.n)
			for j := range positions {
				positions[j] = int32(c.start + j)
			}
			q := normals(r, c.n*heads*hd)
			seqs[i] = AttentionSeq{Q: q, NTokens: c.n, BlockTable: table, ContextIndex: positions}
			wants[i] = naiveAttention(q, c.n, heads, kv, table, positions, scale)
		}
		for _, p := range pools {
			for i := range seqs {
				seqs[i].Out = make([]float32, len(seqs[i].Q))
			}
			if err := AttentionBatch(p, seqs, heads, kv, scale); err != nil {
				t.Fatal(err)
			}
			for i, s := range seqs {
				for j := range s.Out {
					if math.Abs(float64(s.Out[j])-wants[i][j]) > 1e-5 {
						t.Fatalf("%v %s/%d: seq %d out[%d] = %g want %g", chunks, p.KernelSet(), p.Threads(), i, j, s.Out[j], wants[i][j])
					}
				}
			}
		}
	}
}

// TestAttentionBatchErrors checks that a bad sequence is reported with its index.
func TestAttentionBatchErrors(t *testing.T) {
	p := testPool(2)
	defer p.Close()
	kv, err := NewKVCacheLayer(4, 4, 1, 8, quant.F32)
	if err != nil {
		t.Fatal(err)
	}
	good := AttentionSeq{Out: make([]float32, 16), Q: make([]float32, 16), NTokens: 1,
		BlockTable: []int32{0}, ContextIndex: []int32{2}}
	for name, c := range map[string]struct {
		seqs  []AttentionSeq
		heads int
	}{
		"heads":    {[]AttentionSeq{good}, 3},
		"position": {[]AttentionSeq{good, {Out: good.Out, Q: good.Q, NTokens: 1, BlockTable: []int32{0}, ContextIndex: []int32{9}}}, 2},
		"block":    {[]AttentionSeq{good, {Out: good.Out, Q: good.Q, NTokens: 1, BlockTable: []int32{7}, ContextIndex: []int32{0}}}, 2},
		"short q":  {[]AttentionSeq{{Out: good.Out, Q: good.Q[:8], NTokens: 1, BlockTable: []int32{0}, ContextIndex: []int32{0}}}, 2},
	} {
		if err := AttentionBatch(p, c.seqs, c.heads, kv, 1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestAttentionBatchInvariance: a sequence's attention gives the same bits whether it runs
// alone (where a long decode is split into flash-decoding chunk units), in a batch of other
// sequences (one unit per sequence and kv head), or, for a prefill chunk, one token at a
// time — at contexts of several fold chunks, on every kernel set and thread count.
func TestAttentionBatchInvariance(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	const blockSize, hd, numBlocks, kvHeads, heads = 16, 32, 160, 2, 6
	kv, err := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, quant.F32)
	if err != nil {
		t.Fatal(err)
	}
	// Sequence 0: a decode at position 700 or a 9-token chunk ending there; others: decodes.
	table, slots, k, v := randomContext(r, numBlocks, blockSize, kvHeads*hd, numBlocks*blockSize)
	if err := WriteKV(kv, k, v, slots); err != nil {
		t.Fatal(err)
	}
	scale := float32(1 / math.Sqrt(hd))
	row := heads * hd
	for _, n := range []int{1, 9} {
		positions := make([]int32, n)
		for i := range positions {
			positions[i] = int32(700 - n + 1 + i)
		}
		q := normals(r, n*row)
		for _, p := range testPools(t, 1, 2) {
			alone := make([]float32, n*row)
			if err := Attention(p, alone, q, n, heads, kv, table, positions, scale); err != nil {
				t.Fatal(err)
			}
			seqs := []AttentionSeq{{Out: make([]float32, n*row), Q: q, NTokens: n, BlockTable: table, ContextIndex: positions}}
			for i := range 12 {
				pos := []int32{int32(50 + 97*i)}
				seqs = append(seqs, AttentionSeq{Out: make([]float32, row), Q: normals(r, row), NTokens: 1, BlockTable: table, ContextIndex: pos})
			}
			if err := AttentionBatch(p, seqs, heads, kv, scale); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seqs[0].Out, alone) {
				t.Fatalf("%d tokens, %s/%d: batched attention differs from the sequence alone", n, p.KernelSet(), p.Threads())
			}
			for tok := range n {
				one := make([]float32, row)
				if err := Attention(p, one, q[tok*row:(tok+1)*row], 1, heads, kv, table, positions[tok:tok+1], scale); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(one, alone[tok*row:(tok+1)*row]) {
					t.Fatalf("%d tokens, %s/%d: token %d alone differs from its chunk", n, p.KernelSet(), p.Threads(), tok)
				}
			}
		}
	}
}
