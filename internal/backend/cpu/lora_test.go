package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randomLoRA makes a segmented update of tokens over slots of mixed ranks (some tokens
// without an adapter), its output preset to random values.
func randomLoRA(rng *rand.Rand, tokens, in, out, maxRank, slots int) *LoRA {
	f := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	l := &LoRA{Out: f(tokens * out), X: f(tokens * in), U: make([]float32, tokens*maxRank),
		A: f(slots * maxRank * in), B: f(slots * out * maxRank), Tokens: tokens, In: in, OutDim: out, MaxRank: maxRank,
		Slots: make([]int32, tokens), Ranks: make([]int32, slots)}
	for s := range l.Ranks {
		l.Ranks[s] = int32(rng.IntN(maxRank + 1))
	}
	for t := 0; t < tokens; {
		run := 1 + rng.IntN(4)
		s := int32(rng.IntN(slots+1)) - 1
		for ; run > 0 && t < tokens; run-- {
			l.Slots[t] = s
			t++
		}
	}
	return l
}

func cloneLoRA(l *LoRA) *LoRA {
	c := *l
	c.Out = append([]float32(nil), l.Out...)
	c.U = make([]float32, len(l.U))
	return &c
}

// checkLoRA compares the pooled kernel with the reference on l, and each token's result
// with the same token computed alone.
func checkLoRA(t *testing.T, p *Pool, l *LoRA) {
	t.Helper()
	ref, fast := cloneLoRA(l), cloneLoRA(l)
	if err := LoRAMatMulReference(ref); err != nil {
		t.Fatal(err)
	}
	if err := LoRAMatMul(p, fast); err != nil {
		t.Fatal(err)
	}
	for i := range ref.Out {
		if d := math.Abs(float64(ref.Out[i] - fast.Out[i])); d > 1e-4*(1+math.Abs(float64(ref.Out[i]))) {
			t.Fatalf("out[%d] = %v, reference %v", i, fast.Out[i], ref.Out[i])
		}
	}
	for tok := range l.Tokens {
		one := &LoRA{Out: append([]float32(nil), l.Out[tok*l.OutDim:(tok+1)*l.OutDim]...), X: l.X[tok*l.In : (tok+1)*l.In],
			U: make([]float32, l.MaxRank), A: l.A, B: l.B, Tokens: 1, In: l.In, OutDim: l.OutDim, MaxRank: l.MaxRank,
			Slots: l.Slots[tok : tok+1], Ranks: l.Ranks}
		if err := LoRAMatMul(p, one); err != nil {
			t.Fatal(err)
		}
		for o, v := range one.Out {
			if v != fast.Out[tok*l.OutDim+o] {
				t.Fatalf("token %d row %d: %v alone, %v in the batch", tok, o, v, fast.Out[tok*l.OutDim+o])
			}
		}
	}
}

func TestLoRAMatchesReference(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][5]int{{1, 8, 8, 4, 1}, {7, 64, 48, 16, 3}, {33, 40, 172, 64, 4}, {5, 3, 5, 1, 2}} {
		checkLoRA(t, p, randomLoRA(rng, sh[0], sh[1], sh[2], sh[3], sh[4]))
	}
	// A slot past the stack is an error, not a read out of bounds.
	l := randomLoRA(rng, 2, 4, 4, 2, 1)
	l.Slots[1] = 1
	if err := LoRAMatMul(p, l); err == nil {
		t.Fatal("slot outside the stack accepted")
	}
}

func FuzzLoRA(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(16), uint8(12), uint8(8), uint8(3))
	p := NewPool(2)
	f.Cleanup(p.Close)
	f.Fuzz(func(t *testing.T, seed uint64, tokens, in, out, rank, slots uint8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		checkLoRA(t, p, randomLoRA(rng, 1+int(tokens%40), 1+int(in%80), 1+int(out%80), 1+int(rank%32), 1+int(slots%5)))
	})
}
