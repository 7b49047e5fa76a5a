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
	for _, set := range KernelSets() {
		t.Run(set, func(t *testing.T) {
			p, err := NewPoolKernels(2, set)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			// Shapes around the kernels' blocks (16 values, 64 columns, 4 tokens, 4
			// ranks), and a model's (512 in, 1280 out, rank 16) over a decode step's
			// tokens (on the calling thread) and a prefill's (on the pool's threads:
			// over loraParallelMACs).
			for _, sh := range [][5]int{{1, 8, 8, 4, 1}, {7, 64, 48, 16, 3}, {33, 40, 172, 64, 4}, {5, 3, 5, 1, 2},
				{9, 17, 1, 5, 3}, {12, 16, 64, 3, 1}, {6, 31, 79, 7, 2}, {70, 512, 1280, 16, 2}, {300, 512, 1280, 16, 2}} {
				checkLoRA(t, p, randomLoRA(rng, sh[0], sh[1], sh[2], sh[3], sh[4]))
			}
			// A slot past the stack is an error, not a read out of bounds.
			l := randomLoRA(rng, 2, 4, 4, 2, 1)
			l.Slots[1] = 1
			if err := LoRAMatMul(p, l); err == nil {
				t.Fatal("slot outside the stack accepted")
			}
			// So is an operand without features.
			l = randomLoRA(rng, 2, 4, 4, 2, 1)
			l.In, l.A = 0, nil
			if err := LoRAMatMul(p, l); err == nil {
				t.Fatal("zero input features accepted")
			}
		})
	}
}

// TestLoRAKernels compares every kernel set's loraShrink and loraExpand with float64 sums
// of the same products, over lengths around the SIMD blocks (tails of 1 to 15 values,
// blocks of 16 and 64 columns), with 1 to 4 tokens and repeated rows.
func TestLoRAKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	for _, k := range allKernels() {
		for _, n := range []int{1, 7, 15, 16, 17, 63, 64, 65, 100, 512} {
			var x, a [4][]float32
			for i := range 4 {
				x[i], a[i] = vec(n), vec(n+i)
			}
			x[3], a[2] = x[1], a[0]
			var u [16]float32
			k.loraShrink(&x, &a, 4, 4, &u)
			for tk := range 4 {
				for r := range 4 {
					var want float64
					for i := range n {
						want += float64(a[r][i]) * float64(x[tk][i])
					}
					if d := math.Abs(float64(u[tk*4+r]) - want); d > 1e-5*float64(n) {
						t.Fatalf("%s shrink n=%d token %d rank %d: %v, want %v", k.name, n, tk, r, u[tk*4+r], want)
					}
				}
			}
			for _, rank := range []int{1, 3, 16} {
				for nt := 1; nt <= 4; nt++ {
					ldb := n + rank%3
					b := vec((rank-1)*ldb + n)
					var out, us [4][]float32
					for i := range nt {
						out[i], us[i] = vec(n), vec(rank)
					}
					want := make([][]float64, nt)
					for i := range nt {
						want[i] = make([]float64, n)
						for o := range n {
							want[i][o] = float64(out[i][o])
							for r := range rank {
								want[i][o] += float64(us[i][r]) * float64(b[r*ldb+o])
							}
						}
					}
					k.loraExpand(&out, &us, nt, b, ldb)
					for i := range nt {
						for o := range n {
							if d := math.Abs(float64(out[i][o]) - want[i][o]); d > 1e-5*float64(rank+1) {
								t.Fatalf("%s expand n=%d rank %d tokens %d: out[%d][%d] = %v, want %v", k.name, n, rank, nt, i, o, out[i][o], want[i][o])
							}
						}
					}
				}
			}
		}
	}
}

func FuzzLoRA(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(16), uint8(12), uint8(8), uint8(3))
	p := testPool(2)
	f.Cleanup(p.Close)
	f.Fuzz(func(t *testing.T, seed uint64, tokens, in, out, rank, slots uint8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		checkLoRA(t, p, randomLoRA(rng, 1+int(tokens%40), 1+int(in%80), 1+int(out%80), 1+int(rank%32), 1+int(slots%5)))
	})
}

// BenchmarkLoRA times LoRAMatMul on the calling thread over the tokens of a prefill chunk
// (512 of one rank-16 adapter) for the shapes of the trained target's projections: the
// shrink alone (1 output), the expand alone (1 input), and both (512 in, 1280 out);
// GMAC/s counts the useful multiply-adds.
func BenchmarkLoRA(b *testing.B) {
	for _, sh := range []struct {
		name    string
		in, out int
	}{{"shrink512", 512, 1}, {"expand1280", 1, 1280}, {"gate512x1280", 512, 1280}} {
		b.Run(sh.name, func(b *testing.B) {
			p := testPool(1)
			defer p.Close()
			l := randomLoRA(rand.New(rand.NewPCG(1, 1)), 512, sh.in, sh.out, 16, 1)
			l.Ranks[0] = 16
			clear(l.Slots)
			for b.Loop() {
				if err := LoRAMatMul(p, l); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*512*16*float64(sh.in+sh.out)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}
