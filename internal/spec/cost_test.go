package spec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBinOf(t *testing.T) {
	prev := -1
	for n := 1; n <= 1<<21; n++ {
		b := binOf(n)
		if b < 0 || b >= numBins || b < prev {
			t.Fatalf("binOf(%d) = %d after %d", n, b, prev)
		}
		if n <= 32 && b != n-1 {
			t.Fatalf("binOf(%d) = %d, want one bin per count up to 32", n, b)
		}
		prev = b
	}
	if binOf(0) != 0 || binOf(-5) != 0 {
		t.Error("counts below one go to the first bin")
	}
}

// roofline is a GPU-like step cost: flat while memory-bound, then linear in the tokens.
func roofline(n int) float64 { return 0.005 + 0.0001*math.Max(0, float64(n-64)) }

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// TestTargetCostLearnsCurve: from noisy steps at a few token counts the model predicts the
// measured counts closely and interpolates between them, robust to rare outliers.
func TestTargetCostLearnsCurve(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var c targetCost
	counts := []int{1, 2, 3, 5, 8, 64, 128, 256, 2048}
	for range 400 {
		n := counts[rng.IntN(len(counts))]
		tt := roofline(n) * (1 + 0.03*(2*rng.Float64()-1))
		if rng.IntN(50) == 0 {
			tt *= 20 // a pause
		}
		c.observe(n, tt)
	}
	for _, n := range []int{1, 3, 8, 64, 96, 128, 256, 1000, 2048} {
		if got, want := c.seconds(n), roofline(n); !near(got, want, 0.06) {
			t.Errorf("T(%d) = %.3g, want %.3g", n, got, want)
		}
	}
	// Past the last count measured: the last segment's slope.
	if got, want := c.seconds(4096), roofline(4096); !near(got, want, 0.06) {
		t.Errorf("T(4096) = %.3g, want %.3g", got, want)
	}
}

// TestTargetCostMonotone: noise that makes a larger step look cheaper does not make the
// model predict that more tokens cost less.
func TestTargetCostMonotone(t *testing.T) {
	var c targetCost
	c.observe(1, 0.010)
	c.observe(2, 0.009)
	c.observe(3, 0.011)
	prev := 0.0
	for n := 1; n <= 10; n++ {
		s := c.seconds(n)
		if s < prev {
			t.Fatalf("T(%d) = %g < T(%d) = %g", n, s, n-1, prev)
		}
		prev = s
	}
}

// TestTargetCostOnePoint: with one token count measured, fewer tokens cost proportionally
// less and more cost a prior fraction of the cost per token each, so a first multi-token
// step looks worth trying.
func TestTargetCostOnePoint(t *testing.T) {
	var c targetCost
	if c.known() || c.seconds(5) != 0 {
		t.Fatal("an empty model predicts nothing")
	}
	c.observe(4, 0.008)
	if !c.known() || !near(c.seconds(2), 0.004, 1e-9) || !near(c.seconds(8), 0.008+priorSlope*0.002*4, 1e-9) {
		t.Errorf("T(2) = %g, T(8) = %g", c.seconds(2), c.seconds(8))
	}
	// Bad measurements are ignored.
	c.observe(0, 1)
	c.observe(3, -1)
	c.observe(3, math.NaN())
	c.observe(3, math.Inf(1))
	if len(c.points()) != 1 {
		t.Errorf("bad measurements were kept: %v", c.points())
	}
}

// TestTargetCostTracksShift: when the machine slows down for good, the model follows
// within a few dozen steps (outlier clipping slows it, does not stop it).
func TestTargetCostTracksShift(t *testing.T) {
	var c targetCost
	for range 100 {
		c.observe(1, 0.010)
	}
	for range 60 {
		c.observe(1, 0.030)
	}
	if got := c.seconds(1); !near(got, 0.030, 0.05) {
		t.Errorf("T(1) = %g after the shift, want 0.030", got)
	}
}

func TestFitNonNegative(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var xx [3][3]float64
	var xy [3]float64
	var yy float64
	add := func(x [3]float64, y float64) {
		for i := range 3 {
			for j := range 3 {
				xx[i][j] += x[i] * x[j]
			}
			xy[i] += x[i] * y
		}
		yy += y * y
	}
	for range 50 {
		p, tok := 1+rng.IntN(8), 1+rng.IntN(200)
		add([3]float64{1, float64(p), float64(tok)}, 0.001+0.002*float64(p)+0.00001*float64(tok))
	}
	c := fitNonNegative(xx, xy, yy)
	for i, want := range []float64{0.001, 0.002, 0.00001} {
		if !near(c[i], want, 1e-3) {
			t.Errorf("coefficient %d = %g, want %g", i, c[i], want)
		}
	}
	// A negative least-squares coefficient is pinned at zero.
	xx, xy, yy = [3][3]float64{}, [3]float64{}, 0
	for p := 1; p <= 8; p++ {
		add([3]float64{1, float64(p), float64(2 * p)}, 0.01-0.0001*float64(p))
	}
	for i, v := range fitNonNegative(xx, xy, yy) {
		if v < 0 {
			t.Errorf("coefficient %d = %g is negative", i, v)
		}
	}
}

// TestDraftCostLearns: the draft phase's cost per pass and per token are learnt from noisy
// phases of varied shape, with outliers clipped; a phase of one sequence drafting k
// (tokens = passes + 1, collinear) is predicted on that line.
func TestDraftCostLearns(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	truth := func(p, tok int) float64 { return 0.0005 + 0.001*float64(p) + 0.00002*float64(tok) }
	var c draftCost
	if c.seconds(3, 10) != 0 {
		t.Fatal("an unmeasured draft is free")
	}
	for range 300 {
		p := 1 + rng.IntN(6)
		tok := p * (1 + rng.IntN(32))
		tt := truth(p, tok) * (1 + 0.03*(2*rng.Float64()-1))
		if rng.IntN(40) == 0 {
			tt *= 30
		}
		c.observe(p, tok, tt)
	}
	for _, pt := range [][2]int{{1, 1}, {4, 4}, {4, 128}, {6, 200}} {
		if got, want := c.seconds(pt[0], pt[1]), truth(pt[0], pt[1]); !near(got, want, 0.05) {
			t.Errorf("D(%d passes, %d tokens) = %.3g, want %.3g", pt[0], pt[1], got, want)
		}
	}
	if c.seconds(0, 0) != 0 {
		t.Error("no pass, no cost")
	}
	var one draftCost
	for k := 1; k <= 4; k++ {
		for range 10 {
			one.observe(k, k+1, truth(k, k+1))
		}
	}
	for k := 1; k <= 4; k++ {
		if got, want := one.seconds(k, k+1), truth(k, k+1); !near(got, want, 0.02) {
			t.Errorf("collinear D(%d, %d) = %.3g, want %.3g", k, k+1, got, want)
		}
	}
}

// TestDraftCostFirstPhase: a first draft phase that also ran a 130-token prompt is read as
// a cost per token, so a short draft after it is predicted cheap (and gets tried), not as
// dear as that first phase; the next measurement then separates the coefficients.
func TestDraftCostFirstPhase(t *testing.T) {
	var c draftCost
	c.observe(2, 132, 0.0077)
	if got := c.seconds(4, 5); got > 0.0077/10 {
		t.Errorf("after a 132-token catch-up of 7.7 ms, D(4 passes, 5 tokens) = %.3g s, want it read as a cost per token", got)
	}
	truth := func(p, tok int) float64 { return 0.0006*float64(p) + 0.00005*float64(tok) }
	for k := 1; k <= 4; k++ {
		c.observe(k, k+1, truth(k, k+1))
	}
	for _, pt := range [][2]int{{4, 5}, {2, 132}} {
		if got, want := c.seconds(pt[0], pt[1]), truth(pt[0], pt[1]); !near(got, want, 0.1) {
			t.Errorf("D(%d, %d) = %.3g, want %.3g", pt[0], pt[1], got, want)
		}
	}
}
