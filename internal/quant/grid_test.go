package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGridPackDecodes checks that a block packed from a grid's levels decodes, through
// the type's decoder, to exactly the values the grid says the levels stand for, and that
// each element lands within a step of its value.
func TestGridPackDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range GridTypes {
		for trial := range 50 {
			x := make([]float32, QK)
			for i := range x {
				x[i] = float32(rng.NormFloat64()) * float32(1+trial)
			}
			if trial == 0 {
				clear(x) // an all-zero block
			}
			g, err := NewGrid(typ, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			levels := make([]int, QK)
			for i, v := range x {
				levels[i] = g.Level(v)
			}
			b := make([]byte, typ.BlockBytes())
			g.Pack(levels, b)
			y := make([]float32, QK)
			if err := Dequantize(typ, b, y); err != nil {
				t.Fatal(err)
			}
			for i := range x {
				if y[i] != g.Value(levels[i]) {
					t.Fatalf("%s trial %d element %d: decoded %g, grid value %g (level %d)", typ, trial, i, y[i], g.Value(levels[i]), levels[i])
				}
				if d := math.Abs(float64(x[i] - y[i])); d > 1.01*math.Abs(float64(g.D))+1e-3*float64(1+trial) {
					t.Fatalf("%s trial %d element %d: %g decodes to %g, step %g", typ, trial, i, x[i], y[i], g.D)
				}
			}
		}
	}
	if _, err := NewGrid(Q4_K, make([]float32, QK), nil); err == nil {
		t.Fatal("a grid for Q4_K: no error")
	}
}

// TestQuantizeWeightedLowersWeightedError checks that with importance weights the
// encoders' importance-weighted squared error, summed over many rows, is below that of
// the unweighted encoding, and that the encoding decodes.
func TestQuantizeWeightedLowersWeightedError(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 64 * QKK
	x, imp := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		// A few columns matter far more than the rest, as activations make them.
		imp[i] = float32(0.1 + rng.ExpFloat64())
		if i%QK < 3 {
			imp[i] *= 50
		}
	}
	for _, typ := range []Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K} {
		rb, _ := typ.RowBytes(n)
		plain, weighted := make([]byte, rb), make([]byte, rb)
		if err := Quantize(typ, x, plain); err != nil {
			t.Fatal(err)
		}
		if err := QuantizeWeighted(typ, x, imp, weighted); err != nil {
			t.Fatal(err)
		}
		errOf := func(b []byte) float64 {
			y := make([]float32, n)
			if err := Dequantize(typ, b, y); err != nil {
				t.Fatal(err)
			}
			var e float64
			for i := range x {
				d := float64(x[i] - y[i])
				e += float64(imp[i]) * d * d
			}
			return e
		}
		ep, ew := errOf(plain), errOf(weighted)
		if !(ew < ep) {
			t.Errorf("%s: weighted error %g with importance, %g without", typ, ew, ep)
		}
	}
	if err := QuantizeWeighted(Q4_0, x, imp[:10], make([]byte, 18*n/QK)); err == nil {
		t.Error("importance of the wrong length: no error")
	}
}
