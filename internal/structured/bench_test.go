package structured

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMaskLlama3JSON measures one mask on the Llama 3 vocabulary along a random
// generation from the JSON grammar (the generation restarts when it completes).
func BenchmarkMaskLlama3JSON(b *testing.B) {
	v := loadLlama3(b)
	trie, err := NewTokenTrie(v)
	if err != nil {
		b.Fatal(err)
	}
	c := mustGBNF(b, jsonGBNF)
	rng := rand.New(rand.NewPCG(1, 1))
	k := NewMasker(c, trie, v)
	n := v.NumTokens()
	b.ResetTimer()
	for range b.N {
		m := k.Mask()
		b.StopTimer()
		ids := allowedIDs(m, n)
		tok := ids[rng.IntN(len(ids))]
		if v.IsEOG(int(tok)) || k.m.Len() > 300 {
			k = NewMasker(c, trie, v)
		} else if err := k.Accept([]int32{tok}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
