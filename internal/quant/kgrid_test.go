package quant

import (
	"math/rand/v2"
	"testing"
)

// TestSuperGridMatchesQuantize checks that a super-block packed from its grid's nearest
// levels decodes to exactly the values the grid says the levels stand for, and to exactly
// what Quantize (or QuantizeWeighted) gives the same values: the grid is the encoder's.
func TestSuperGridMatchesQuantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range SuperGridTypes {
		for trial := range 30 {
			x, imp := make([]float32, QKK), make([]float32, QKK)
			for i := range x {
				x[i] = float32(rng.NormFloat64()) * float32(1+trial%7)
				if trial%3 == 1 {
					x[i] += 0.5 // a block off centre: the mins matter
				}
				imp[i] = float32(rng.ExpFloat64())
			}
			if trial == 0 {
				clear(x)
			}
			var w []float32
			if trial%2 == 1 {
				w = imp
			}
			g, err := NewSuperGrid(typ, x, w)
			if err != nil {
				t.Fatal(err)
			}
			levels := make([]int, QKK)
			for i, v := range x {
				levels[i] = g.Level(i, v)
			}
			b := make([]byte, typ.BlockBytes())
			g.Pack(levels, b)
			got := make([]float32, QKK)
			if err := Dequantize(typ, b, got); err != nil {
				t.Fatal(err)
			}
			ref := make([]byte, typ.BlockBytes())
			if w != nil {
				err = QuantizeWeighted(typ, x, w, ref)
			} else {
				err = Quantize(typ, x, ref)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, QKK)
			if err := Dequantize(typ, ref, want); err != nil {
				t.Fatal(err)
			}
			for i := range x {
				if got[i] != g.Value(i, levels[i]) {
					t.Fatalf("%s trial %d element %d: decoded %g, grid value %g (level %d)", typ, trial, i, got[i], g.Value(i, levels[i]), levels[i])
				}
				if got[i] != want[i] {
					t.Fatalf("%s trial %d element %d: %g from the grid, %g from the encoder", typ, trial, i, got[i], want[i])
				}
			}
		}
	}
	if _, err := NewSuperGrid(Q4_0, make([]float32, QKK), nil); err == nil {
		t.Fatal("a super-block grid for Q4_0: no error")
	}
	if _, err := NewSuperGrid(Q4_K, make([]float32, QK), nil); err == nil {
		t.Fatal("a super-block grid of 32 values: no error")
	}
}

// TestSuperGridRefit checks that refitting a sub-block to values that have moved since
// the grid was chosen lowers (or keeps) their rounding error, and that the block packed
// afterwards still decodes to exactly the grid's values.
func TestSuperGridRefit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range SuperGridTypes {
		var moved, lowered int
		for trial := range 20 {
			x := make([]float32, QKK)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			g, err := NewSuperGrid(typ, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The values move, as GPTQ's updates move them: sub-block j by a shift and a
			// stretch.
			for j := 1; j < QKK/g.Sub; j++ {
				sub := x[j*g.Sub : (j+1)*g.Sub]
				for l := range sub {
					sub[l] = sub[l]*float32(0.5+rng.Float64()) + float32(0.3*rng.NormFloat64())
				}
				before := g.sqErr(j, sub, nil)
				g.Refit(j, sub, nil)
				after := g.sqErr(j, sub, nil)
				if after > before {
					t.Fatalf("%s trial %d sub-block %d: error %g after refitting, %g before", typ, trial, j, after, before)
				}
				moved++
				if after < before {
					lowered++
				}
			}
			levels := make([]int, QKK)
			for i, v := range x {
				levels[i] = g.Level(i, v)
			}
			b := make([]byte, typ.BlockBytes())
			g.Pack(levels, b)
			got := make([]float32, QKK)
			if err := Dequantize(typ, b, got); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != g.Value(i, levels[i]) {
					t.Fatalf("%s trial %d element %d: decoded %g, grid value %g", typ, trial, i, got[i], g.Value(i, levels[i]))
				}
			}
		}
		t.Logf("%s: %d of %d moved sub-blocks fitted better", typ, lowered, moved)
		if lowered < moved/2 {
			t.Errorf("%s: only %d of %d moved sub-blocks fitted better", typ, lowered, moved)
		}
	}
}
