package train

import (
	"math"
	"testing"
)

func TestSchedule(t *testing.T) {
	o := AdamW{LR: 1, MinLR: 0.1, Warmup: 10, Steps: 110}
	cases := []struct {
		step int
		want float64
	}{
		{0, 0.1}, {4, 0.5}, {9, 1}, // linear warmup
		{10, 1}, {60, 0.55}, {110, 0.1}, {500, 0.1}, // cosine from LR to MinLR
	}
	for _, c := range cases {
		if got := o.Rate(c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("step %d: rate %g, want %g", c.step, got, c.want)
		}
	}
}

func TestAdamWStep(t *testing.T) {
	// Adam's first step moves every weight by lr against its gradient's sign, whatever the
	// gradient's size; decay shrinks matrices (Decay) by lr*wd first; clipping changes no
	// first step (Adam is scale-free) but is reported through the norm.
	o := AdamW{LR: 0.01, MinLR: 0.01, Warmup: 1, Steps: 10, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12, WeightDecay: 0.5, Clip: 1}
	ps := []Param{{Name: "m", W: []float32{1, 1, 1}, Decay: true}, {Name: "n", W: []float32{1, 1}}}
	gs := []Param{{Name: "m", W: []float32{3, -4, 0}}, {Name: "n", W: []float32{1e-3, -12}}}
	norm, lr := o.update(ps, gs, newAdamState(ps), 0)
	if want := math.Sqrt(9 + 16 + 1e-6 + 144); math.Abs(norm-want) > 1e-9 || lr != 0.01 {
		t.Fatalf("norm %g lr %g, want %g and 0.01", norm, lr, want)
	}
	want := [][]float32{{0.995 - 0.01, 0.995 + 0.01, 0.995}, {0.99, 1.01}}
	for i, p := range ps {
		for j, w := range p.W {
			if math.Abs(float64(w-want[i][j])) > 1e-6 {
				t.Errorf("%s[%d] = %v, want %v", p.Name, j, w, want[i][j])
			}
		}
	}
}
