package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDrawIndexOrderDistribution: over many uniform draws, DrawIndexOrder picks each token
// as often as the restricted distribution the sorted-candidates Sampler uses says, and
// never a token outside it.
func TestDrawIndexOrderDistribution(t *testing.T) {
	logits := []float32{1.5, -0.3, 2.2, 0.9, 2.2, -1.1, 0.1, 1.0}
	cases := []struct {
		temp float32
		topK int
		topP float32
	}{{1, 0, 1}, {0.7, 3, 1}, {1.3, 0, 0.8}, {0.9, 5, 0.6}}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range cases {
		// The reference distribution: the Sampler's processors on the same logits.
		var cand Candidates
		cand.Reset(logits)
		for _, p := range New(Params{Temperature: c.temp, TopK: c.topK, TopP: c.topP}).procs {
			p.Process(&cand)
		}
		want := map[int]float64{}
		for i, p := range cand.Probs() {
			want[int(cand.IDs[i])] = p
		}
		const draws = 200000
		got := map[int]float64{}
		for range draws {
			got[DrawIndexOrder(logits, c.temp, c.topK, c.topP, rng.Float64())] += 1.0 / draws
		}
		for id, p := range got {
			if _, ok := want[id]; !ok {
				t.Errorf("%+v: drew token %d, outside the kept set %v", c, id, want)
			}
			if math.Abs(p-want[id]) > 0.01 {
				t.Errorf("%+v: token %d drawn %.4f of the time, want %.4f", c, id, p, want[id])
			}
		}
	}
}

func TestDrawIndexOrderGreedy(t *testing.T) {
	logits := []float32{0.5, 3, -1, 3, 2}
	if got := DrawIndexOrder(logits, 1, 1, 1, 0); got != 1 {
		t.Errorf("top-1 at u=0 drew %d, want the first of the tied largest, 1", got)
	}
	if got := DrawIndexOrder(logits, 1, 1, 1, 0.99); got != 3 {
		t.Errorf("top-1 at u=0.99 drew %d, want the second of the tied largest, 3", got)
	}
	if got := DrawIndexOrder(nil, 1, 0, 1, 0.5); got != -1 {
		t.Errorf("no logits: %d", got)
	}
}
