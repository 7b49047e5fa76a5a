// Package stattest holds statistical checks that tests share: Pearson's chi-square test of
// observed counts against expected probabilities. Only tests import it.
package stattest

import (
	"fmt"
	"math"
)

// ChiSquare returns Pearson's statistic of observed counts against the probabilities want
// (summing to 1), its degrees of freedom and the p-value: the chance that counts drawn from
// want deviate at least as much. Categories expected fewer than 5 times are pooled into one,
// as the test's approximation asks; an observed event of probability 0 gives p = 0.
func ChiSquare(observed []int, want []float64) (stat float64, dof int, p float64, err error) {
	if len(observed) != len(want) {
		return 0, 0, 0, fmt.Errorf("stattest: %d counts for %d probabilities", len(observed), len(want))
	}
	n := 0
	for _, o := range observed {
		n += o
	}
	if n == 0 {
		return 0, 0, 0, fmt.Errorf("stattest: no observations")
	}
	var poolObs, poolExp float64
	cats := 0
	for i, o := range observed {
		e := want[i] * float64(n)
		if e < 5 {
			poolObs += float64(o)
			poolExp += e
			continue
		}
		d := float64(o) - e
		stat += d * d / e
		cats++
	}
	switch {
	case poolExp == 0 && poolObs > 0:
		return math.Inf(1), cats - 1, 0, nil // an event of probability 0 happened
	case poolExp > 0:
		d := poolObs - poolExp
		stat += d * d / poolExp
		cats++
	}
	dof = cats - 1
	if dof < 1 {
		return stat, dof, 1, nil
	}
	return stat, dof, upperGammaQ(float64(dof)/2, stat/2), nil
}

// upperGammaQ is the regularized upper incomplete gamma function Q(a, x) = Γ(a, x)/Γ(a), by
// its series for x < a+1 and its continued fraction beyond.
func upperGammaQ(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for n := 1; n < 1000; n++ {
			term *= x / (a + float64(n))
			sum += term
			if math.Abs(term) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return 1 - sum*math.Exp(-x+a*math.Log(x)-lg)
	}
	// Lentz's method for the continued fraction.
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i < 1000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return math.Exp(-x+a*math.Log(x)-lg) * h
}
