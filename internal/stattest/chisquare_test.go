package stattest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestUpperGammaQ checks Q against closed forms: Q(1, x) = e^-x, and the chi-square
// distribution's known critical values (dof 1 at 3.841 and dof 10 at 18.307 are p = 0.05).
func TestUpperGammaQ(t *testing.T) {
	for _, x := range []float64{0.1, 1, 3, 10} {
		if got := upperGammaQ(1, x); math.Abs(got-math.Exp(-x)) > 1e-12 {
			t.Errorf("Q(1, %g) = %g, want %g", x, got, math.Exp(-x))
		}
	}
	for _, c := range []struct{ dof, x, p float64 }{{1, 3.841, 0.05}, {10, 18.307, 0.05}, {4, 13.277, 0.01}} {
		if got := upperGammaQ(c.dof/2, c.x/2); math.Abs(got-c.p) > 2e-4 {
			t.Errorf("chi-square p(dof %g, %g) = %g, want %g", c.dof, c.x, got, c.p)
		}
	}
}

// TestChiSquare: counts drawn from the expected distribution pass; counts drawn from
// another fail.
func TestChiSquare(t *testing.T) {
	want := []float64{0.5, 0.25, 0.125, 0.0625, 0.0625}
	r := rand.New(rand.NewPCG(1, 2))
	draw := func(p []float64) []int {
		counts := make([]int, len(p))
		for range 20000 {
			u, s := r.Float64(), 0.0
			for i, q := range p {
				if s += q; u < s {
					counts[i]++
					break
				}
			}
		}
		return counts
	}
	if _, _, p, err := ChiSquare(draw(want), want); err != nil || p < 0.001 {
		t.Errorf("same distribution: p %g (%v)", p, err)
	}
	if _, _, p, _ := ChiSquare(draw([]float64{0.45, 0.3, 0.125, 0.0625, 0.0625}), want); p > 1e-6 {
		t.Errorf("another distribution: p %g, want tiny", p)
	}
}
