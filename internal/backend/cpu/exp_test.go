package cpu

import (
	"math"
	"math/rand"
	"testing"
)

// checkExp compares every kernel set's exp with math.Exp (relative error <= 1e-6 inside the
// clamped range, saturation outside it) and with the generic twin (a few ulps).
func checkExp(t *testing.T, seed int64, n int, spread float64) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32((r.Float64()*2 - 1) * spread)
	}
	want := make([]float32, n)
	expGeneric(want, src)
	for _, k := range allKernels() {
		got := make([]float32, n)
		k.exp(got, src)
		for i, x := range src {
			ref := math.Exp(float64(min(max(x, expLo), expHi)))
			if d := math.Abs(float64(got[i]) - ref); d > 1e-6*ref {
				t.Fatalf("%s exp(%g) = %g, math.Exp %g (rel %g)", k.name, x, got[i], ref, d/ref)
			}
			if d := math.Abs(float64(got[i] - want[i])); d > 4e-7*float64(want[i]) {
				t.Fatalf("%s exp(%g) = %g, generic %g", k.name, x, got[i], want[i])
			}
		}
	}
}

func TestExp(t *testing.T) {
	for i, spread := range []float64{1, 10, 87, 200} {
		for _, n := range []int{1, 8, 13, 1000} {
			checkExp(t, int64(10*i+n), n, spread)
		}
	}
	for _, k := range allKernels() {
		special := []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -1000, 1000, 0, 0}
		got := make([]float32, len(special))
		k.exp(got, special)
		if got[0] != 1 || got[1] < 1e38 || got[2] > 1e-37 || got[3] == got[3] || got[4] > 1e-37 || got[5] < 1e38 {
			t.Fatalf("%s exp%v = %v", k.name, special, got)
		}
	}
}

func FuzzExp(f *testing.F) {
	f.Add(int64(1), uint16(9), 5.0)
	f.Add(int64(2), uint16(100), 100.0)
	f.Fuzz(func(t *testing.T, seed int64, n uint16, spread float64) {
		if math.IsNaN(spread) || math.IsInf(spread, 0) {
			t.Skip()
		}
		checkExp(t, seed, int(n%2048)+1, math.Min(math.Abs(spread), 1e6))
	})
}
