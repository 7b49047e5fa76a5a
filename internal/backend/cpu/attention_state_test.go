package cpu

import (
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestAttentionStateReuse checks that a warm pool's attention allocates no work state per
// claimed chunk (the allocations left are the loop closures, a fixed few per call,
// whatever the number of units), and that reused states, dirty from a call with other
// shapes, give the same bits as fresh ones.
func TestAttentionStateReuse(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	const blockSize, hd, numBlocks, kvHeads, heads = 16, 64, 16, 8, 32
	kv, err := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, quant.F32)
	if err != nil {
		t.Fatal(err)
	}
	for i := range kv.K {
		kv.K[i], kv.V[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	table := make([]int32, numBlocks)
	for i := range table {
		table[i] = int32(numBlocks - 1 - i)
	}
	const nTokens = 40
	q := normals(r, nTokens*heads*hd)
	positions := make([]int32, nTokens)
	for i := range positions {
		positions[i] = int32(100 + i)
	}
	run := func(p *Pool, n int) []float32 {
		out := make([]float32, n*heads*hd)
		if err := Attention(p, out, q[:n*heads*hd], n, heads, kv, table, positions[:n], 0.125); err != nil {
			t.Fatal(err)
		}
		return out
	}
	fresh := testPool(2)
	defer fresh.Close()
	want := run(fresh, 1)
	fresh.Close()

	p := testPool(2)
	defer p.Close()
	_ = run(p, nTokens) // leaves prefill-shaped states behind
	got := run(p, 1)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("out[%d] = %v with reused states, %v with fresh ones", i, got[i], want[i])
		}
	}
	out := make([]float32, nTokens*heads*hd)
	allocs := testing.AllocsPerRun(20, func() {
		_ = Attention(p, out, q, nTokens, heads, kv, table, positions, 0.125)
	})
	// 3 tiles x 8 kv heads = 24 units in up to 8 chunks; a state per chunk costs 8.
	if allocs > 4 {
		t.Errorf("Attention allocates %v times per call on a warm pool, want at most 4", allocs)
	}
}
