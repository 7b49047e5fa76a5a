package spec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExpectedTokens(t *testing.T) {
	for _, tc := range []struct {
		a    float64
		k    int
		want float64
	}{
		{0.5, 0, 1}, {0.5, 1, 1.5}, {0.5, 3, 1.875}, {0, 4, 1}, {1, 4, 5},
		{0.8, 4, (1 - math.Pow(0.8, 5)) / 0.2},
	} {
		if got := expectedTokens(tc.a, tc.k); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("E(%g, %d) = %g, want %g", tc.a, tc.k, got, tc.want)
		}
	}
}

// TestTallyEstimatesRate: verifications simulated with a known per-token acceptance rate
// give that rate back; the prior holds at first and fades.
func TestTallyEstimatesRate(t *testing.T) {
	var empty tally
	if got := empty.rate(0.3, 2); got != 0.3 {
		t.Errorf("no verdicts: %g, want the prior 0.3", got)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, a := range []float64{0, 0.3, 0.64, 0.9} {
		var tl tally
		for range 2000 {
			k := 1 + rng.IntN(6)
			kept := 0
			for kept < k && rng.Float64() < a {
				kept++
			}
			tl.add(k, kept, 0.999)
		}
		if got := tl.rate(0.5, 2); math.Abs(got-a) > 0.04 {
			t.Errorf("rate %g estimated as %g", a, got)
		}
	}
	// Forgetting: after a switch from always accepted to never, the estimate drops.
	var tl tally
	for range 100 {
		tl.add(4, 4, 0.85)
	}
	for range 20 {
		tl.add(4, 0, 0.85)
	}
	if got := tl.rate(0.5, 2); got > 0.25 {
		t.Errorf("after 20 rejections the estimate is still %g", got)
	}
	var all tally
	for range 1000 {
		all.add(4, 4, 1)
	}
	if got := all.rate(0.5, 2); got != maxRate {
		t.Errorf("always accepted: %g, want the cap %g", got, maxRate)
	}
}
