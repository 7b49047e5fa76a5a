package spec

import (
	"math"
	"sort"
)

// This file holds the online cost models of dynamic speculation, both in seconds: the
// target's step as a function of its token count (targetCost; Dynamic keeps one for steps
// that verify drafts and one for steps that do not), and the draft phase as a function of
// its forward passes and tokens (draftCost). Both learn from every step's measured cost,
// forget old steps exponentially, and clip outliers (a garbage-collection pause, another
// process's burst) so that one bad measurement moves them little.

// Learning constants.
const (
	// binRate is the least weight a new measurement gets in its token-count bin (the bin
	// is a running mean of about 1/binRate recent steps).
	binRate = 0.1
	// clipDevs clips a measurement's residual at this many mean absolute deviations.
	clipDevs = 3.0
	// minDevFrac floors the deviation at this fraction of the mean, so that a run of
	// identical measurements does not make the next different one an outlier forever.
	minDevFrac = 0.05
	// priorSlope is the cost of one more token of a step, as a fraction of a step's cost
	// per token, assumed where only one token count has been measured: optimistic enough
	// that a first multi-token step is tried, after which it is measured.
	priorSlope = 0.25
	// draftDecay is the weight an earlier draft-phase measurement keeps per new one.
	draftDecay = 0.97
)

// numBins is the number of token-count bins: one per count up to 32, then four per
// doubling up to 2^20 tokens.
const numBins = 32 + 4*15 + 1

// binOf returns the bin of a step of n tokens.
func binOf(n int) int {
	if n <= 32 {
		return max(n, 1) - 1
	}
	b := 32 + int(4*math.Log2(float64(n)/32))
	return min(b, numBins-1)
}

// bin is a robust running mean of the steps of similar token counts: their mean token
// count n, mean seconds t, and mean absolute deviation dev of the seconds.
type bin struct {
	n, t, dev float64
	count     float64
}

// observe adds a step of n tokens that took t seconds.
func (b *bin) observe(n, t float64) {
	if b.count == 0 {
		b.n, b.t, b.dev, b.count = n, t, minDevFrac*t, 1
		return
	}
	b.count++
	w := max(1/b.count, binRate)
	r := t - b.t
	lim := clipDevs * max(b.dev, minDevFrac*b.t)
	rc := min(max(r, -lim), lim)
	b.t += w * rc
	b.n += w * (n - b.n)
	b.dev += w * (math.Abs(rc) - b.dev)
}

// point is a measured (tokens, seconds) pair of the target's cost curve.
type point struct{ n, t float64 }

// targetCost models the seconds of the target's forward pass over n tokens: a robust
// running mean per bin of token counts, read as a piecewise-linear curve through the bins'
// means, made non-decreasing, and extended past the measured counts by its end slopes.
type targetCost struct {
	bins [numBins]bin
	// curve caches the curve's points (nil: to be rebuilt).
	curve []point
}

// observe adds a step of n tokens that took t seconds.
func (c *targetCost) observe(n int, t float64) {
	if n <= 0 || !(t > 0) || math.IsInf(t, 0) {
		return
	}
	c.bins[binOf(n)].observe(float64(n), t)
	c.curve = nil
}

// points returns the curve's points in order of tokens, their seconds made
// non-decreasing (a step of more tokens never costs less).
func (c *targetCost) points() []point {
	if c.curve != nil {
		return c.curve
	}
	c.curve = []point{}
	for i := range c.bins {
		b := &c.bins[i]
		if b.count == 0 {
			continue
		}
		p := point{b.n, b.t}
		if k := len(c.curve); k > 0 && p.t < c.curve[k-1].t {
			p.t = c.curve[k-1].t
		}
		c.curve = append(c.curve, p)
	}
	return c.curve
}

// known reports whether any step has been measured.
func (c *targetCost) known() bool { return len(c.points()) > 0 }

// seconds predicts the seconds of a step of n tokens (0 when nothing is measured).
func (c *targetCost) seconds(n int) float64 {
	pts := c.points()
	x := float64(n)
	switch len(pts) {
	case 0:
		return 0
	case 1:
		p := pts[0]
		if x <= p.n {
			return p.t * x / p.n
		}
		return p.t + priorSlope*p.t/p.n*(x-p.n)
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].n >= x })
	switch {
	case i == 0:
		// Before the first point: the first segment's slope, but never below the
		// first point's cost per token times n.
		a, b := pts[0], pts[1]
		return max(a.t-slope(a, b)*(a.n-x), a.t*x/a.n)
	case i == len(pts):
		a, b := pts[len(pts)-2], pts[len(pts)-1]
		return b.t + slope(a, b)*(x-b.n)
	}
	a, b := pts[i-1], pts[i]
	return a.t + slope(a, b)*(x-a.n)
}

// slope returns the seconds per token between two points of the curve (0 when they have
// the same token count).
func slope(a, b point) float64 {
	if b.n <= a.n {
		return 0
	}
	return (b.t - a.t) / (b.n - a.n)
}

// draftCost models the seconds of a step's draft phase as c0 + c1*passes + c2*tokens, with
// non-negative coefficients fitted by exponentially weighted least squares (the fixed cost
// of a draft phase, each forward pass's own cost, and each token's).
type draftCost struct {
	xx    [3][3]float64
	xy    [3]float64
	yy    float64
	count float64
	dev   float64 // mean absolute residual, for clipping
	coef  [3]float64
}

// observe adds a draft phase of passes forward passes over tokens tokens that took t
// seconds.
func (c *draftCost) observe(passes, tokens int, t float64) {
	if passes <= 0 || !(t > 0) || math.IsInf(t, 0) {
		return
	}
	x := [3]float64{1, float64(passes), float64(tokens)}
	if c.count >= 3 {
		pred := c.predictX(x)
		lim := clipDevs * max(c.dev, minDevFrac*pred)
		r := min(max(t-pred, -lim), lim)
		c.dev += binRate * (math.Abs(r) - c.dev)
		t = pred + r
	} else {
		c.dev = max(c.dev, minDevFrac*t)
	}
	for i := range 3 {
		for j := range 3 {
			c.xx[i][j] = draftDecay*c.xx[i][j] + x[i]*x[j]
		}
		c.xy[i] = draftDecay*c.xy[i] + x[i]*t
	}
	c.yy = draftDecay*c.yy + t*t
	c.count++
	c.coef = fitNonNegative(c.xx, c.xy, c.yy)
}

// seconds predicts a draft phase of passes passes over tokens tokens (0 when there is
// none, or when nothing is measured yet: a draft is assumed free until it is timed).
func (c *draftCost) seconds(passes, tokens int) float64 {
	if passes <= 0 || c.count == 0 {
		return 0
	}
	return c.predictX([3]float64{1, float64(passes), float64(tokens)})
}

func (c *draftCost) predictX(x [3]float64) float64 {
	return c.coef[0]*x[0] + c.coef[1]*x[1] + c.coef[2]*x[2]
}

// fitNonNegative returns the least-squares coefficients with none negative, from the
// normal equations' sums (xx = sum of x x^T, xy = sum of x y, yy = sum of y^2): the best
// fit over every subset of coefficients left free (the others zero) whose solution is
// non-negative. A small ridge keeps the collinear cases (every phase of one sequence has
// tokens = passes + 1) solvable; they are then split between the coefficients.
//
// Subsets are tried from the simplest, tokens before passes before the fixed cost, and a
// later one wins only by fitting clearly better (by more than fitTie of yy). So while the
// measurements cannot tell the coefficients apart (the first draft phase, which also ran a
// sequence's prompt), its cost is read as a cost per token: a short draft then looks
// cheap, is tried, and its measurement separates the coefficients. Read as a fixed cost
// instead, it would make every draft look as dear as that first one, and none would be
// tried again.
func fitNonNegative(xx [3][3]float64, xy [3]float64, yy float64) [3]float64 {
	var best [3]float64
	bestErr := math.Inf(1)
	for _, idx := range fitSubsets {
		coef, ok := solveSubset(xx, xy, idx)
		if !ok {
			continue
		}
		// Sum of squared residuals: yy - 2 b.xy + b.xx.b.
		e := yy
		for i := range 3 {
			e -= 2 * coef[i] * xy[i]
			for j := range 3 {
				e += coef[i] * xx[i][j] * coef[j]
			}
		}
		if math.IsInf(bestErr, 1) || e < bestErr-fitTie*yy {
			best, bestErr = coef, e
		}
	}
	return best
}

// fitSubsets are the subsets of draftCost's coefficients (0 fixed, 1 per pass, 2 per
// token) fitNonNegative tries, in order of preference.
var fitSubsets = [][]int{{2}, {1}, {0}, {1, 2}, {0, 2}, {0, 1}, {0, 1, 2}}

// fitTie is the least improvement of the squared residuals, as a fraction of the squared
// measurements, by which a later subset beats an earlier one: well below any real
// difference (a 0.1% RMS misfit is 1e-6 of them), well above the ridge's rounding.
const fitTie = 1e-9

// solveSubset solves the normal equations restricted to the coefficients idx (Gaussian
// elimination with a small ridge); false when the solution has a negative coefficient or
// the system is degenerate.
func solveSubset(xx [3][3]float64, xy [3]float64, idx []int) ([3]float64, bool) {
	n := len(idx)
	var a [3][4]float64
	for r, i := range idx {
		for c, j := range idx {
			a[r][c] = xx[i][j]
		}
		a[r][r] += 1e-6*xx[i][i] + 1e-18
		a[r][n] = xy[i]
	}
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if a[p][col] == 0 {
			return [3]float64{}, false
		}
		a[col], a[p] = a[p], a[col]
		for r := range n {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for c := col; c <= n; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	var coef [3]float64
	for r, i := range idx {
		v := a[r][n] / a[r][r]
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return [3]float64{}, false
		}
		coef[i] = v
	}
	return coef, true
}
