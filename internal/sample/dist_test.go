package sample

import (
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/stattest"
)

// randomDist is a distribution over n tokens with random weights, some of them zero, in a
// shuffled order.
func randomDist(r *rand.Rand, n int) Dist {
	d := Dist{}
	var sum float64
	for _, id := range r.Perm(n) {
		w := r.Float64()
		if r.IntN(4) == 0 {
			continue
		}
		d.IDs = append(d.IDs, int32(id))
		d.P = append(d.P, w)
		sum += w
	}
	for i := range d.P {
		d.P[i] /= sum
	}
	return d
}

// TestRejectionSamplingExact: a token drawn from q and verified against p (kept by
// KeepDraft, else replaced by Residual) is distributed as p, by a chi-square test over
// 40,000 draws, for draft distributions close to p, far from it, and point masses; a wrong
// rule (keep every draft) fails the same test. The 18 tests share a family-wise level of
// 0.001 (Bonferroni: 0.001/18 each).
func TestRejectionSamplingExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n, draws, trials = 12, 40000, 6
	level := 0.001 / (3 * trials)
	verify := func(p, q Dist, keepAll bool) []int {
		counts := make([]int, n)
		for range draws {
			d := q.Draw(r.Float64())
			tok := d
			if !keepAll && !KeepDraft(p, q, d, r.Float64()) {
				tok = Residual(p, q, r.Float64())
			}
			counts[tok]++
		}
		return counts
	}
	dense := func(d Dist) []float64 {
		out := make([]float64, n)
		for i, id := range d.IDs {
			out[id] = d.P[i]
		}
		return out
	}
	for trial := range trials {
		p := randomDist(r, n)
		qs := map[string]Dist{"random": randomDist(r, n), "point mass": {IDs: []int32{p.IDs[trial%len(p.IDs)]}, P: []float64{1}}}
		near := Dist{IDs: append([]int32(nil), p.IDs...), P: make([]float64, len(p.P))}
		var sum float64
		for i := range p.P {
			near.P[i] = p.P[i] * (0.8 + 0.4*r.Float64())
			sum += near.P[i]
		}
		for i := range near.P {
			near.P[i] /= sum
		}
		qs["near p"] = near
		for name, q := range qs {
			if _, _, pv, err := stattest.ChiSquare(verify(p, q, false), dense(p)); err != nil || pv < level {
				t.Errorf("trial %d, q %s: verified tokens are not distributed as p (p-value %g, %v)", trial, name, pv, err)
			}
		}
		if _, _, pv, _ := stattest.ChiSquare(verify(p, qs["random"], true), dense(p)); pv > level {
			t.Errorf("trial %d: keeping every draft passed the test (p-value %g)", trial, pv)
		}
	}
}

// TestDist: a sampler's distribution is what Sample draws from: the same token for the same
// uniform, top-k's candidates only, and greedy's one token.
func TestDist(t *testing.T) {
	logits := []float32{0.5, 2, -1, 1.5, 0, 3, -2, 1}
	s := New(Params{Temperature: 0.7, TopK: 4, Seed: 9})
	d := s.Dist(logits)
	if len(d.IDs) != 4 {
		t.Fatalf("top-4 distribution has %d candidates", len(d.IDs))
	}
	var sum float64
	for _, p := range d.P {
		sum += p
	}
	if sum < 0.999999 || sum > 1.000001 {
		t.Errorf("probabilities sum to %g", sum)
	}
	twin := New(Params{Temperature: 0.7, TopK: 4, Seed: 9})
	for range 50 {
		u := twin.rng.Float64()
		if got, want := d.Draw(u), int32(s.Sample(logits)); got != want {
			t.Fatalf("Dist.Draw %d, Sample %d for the same uniform", got, want)
		}
	}
	g := New(Params{}).Dist(logits)
	if len(g.IDs) != 1 || g.IDs[0] != 5 || g.P[0] != 1 {
		t.Errorf("greedy distribution %+v", g)
	}
}
