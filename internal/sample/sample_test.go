package sample

import (
	"math"
	"slices"
	"testing"
)

func TestGreedy(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		logits []float32
		want   int
	}{
		{nil, -1},
		{[]float32{1}, 0},
		{[]float32{1, 3, 2}, 1},
		{[]float32{3, 1, 3}, 0}, // lowest id on ties
		{[]float32{-5, -2, -2, -9}, 1},
		{[]float32{nan, 1, 2}, 2},
		{[]float32{nan, nan}, 0},
	}
	for _, c := range cases {
		if got := Greedy(c.logits); got != c.want {
			t.Errorf("Greedy(%v) = %d, want %d", c.logits, got, c.want)
		}
	}
}

func cands(logits ...float32) *Candidates {
	c := &Candidates{}
	c.Reset(logits)
	return c
}

func TestTopK(t *testing.T) {
	big := make([]float32, 100)
	for i := range big {
		big[i] = float32((i * 37) % 100)
	}
	cases := []struct {
		logits []float32
		k      int
		want   []int32
	}{
		{[]float32{1, 5, 3, 5, 2}, 2, []int32{1, 3}},
		{[]float32{1, 5, 3, 5, 2}, 3, []int32{1, 3, 2}},
		{[]float32{1, 2}, 5, []int32{0, 1}}, // k beyond the list leaves it alone
		{big, 3, []int32{27, 54, 81}},       // heap path: values 99, 98, 97
	}
	for _, c := range cases {
		cd := cands(c.logits...)
		TopK(c.k).Process(cd)
		if !slices.Equal(cd.IDs, c.want) {
			t.Errorf("TopK(%d) of %v kept %v, want %v", c.k, c.logits, cd.IDs, c.want)
		}
	}
}

func TestTopPAndMinP(t *testing.T) {
	// Probabilities 0.5, 0.25, 0.125, 0.125.
	l := []float32{float32(math.Log(4)), float32(math.Log(2)), 0, 0}
	cd := cands(l...)
	TopP(0.7).Process(cd)
	if !slices.Equal(cd.IDs, []int32{0, 1}) {
		t.Errorf("TopP(0.7) kept %v, want [0 1]", cd.IDs)
	}
	cd = cands(l...)
	TopP(0.5).Process(cd)
	if !slices.Equal(cd.IDs, []int32{0}) {
		t.Errorf("TopP(0.5) kept %v, want [0]", cd.IDs)
	}
	cd = cands(l...)
	MinP(0.3).Process(cd)
	if !slices.Equal(cd.IDs, []int32{0, 1}) {
		t.Errorf("MinP(0.3) kept %v, want [0 1]", cd.IDs)
	}
	cd = cands(l...)
	MinP(0.2).Process(cd)
	if len(cd.IDs) != 4 {
		t.Errorf("MinP(0.2) kept %v, want all", cd.IDs)
	}
}

func TestTemperature(t *testing.T) {
	cd := cands(2, -4)
	Temperature(2).Process(cd)
	if !slices.Equal(cd.Logits, []float32{1, -2}) {
		t.Errorf("Temperature(2) gave %v", cd.Logits)
	}
}

// TestSamplerSeeded: the same seed draws the same tokens; the draw follows the
// distribution; temperature 0 is greedy.
func TestSamplerSeeded(t *testing.T) {
	logits := []float32{0, float32(math.Log(3)), -100}
	run := func(seed uint64) []int {
		s := New(Params{Temperature: 1, Seed: seed})
		var out []int
		for range 4000 {
			out = append(out, s.Sample(logits))
		}
		return out
	}
	a, b, c := run(1), run(1), run(2)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different draws")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds, same draws")
	}
	var counts [3]int
	for _, id := range a {
		counts[id]++
	}
	if frac := float64(counts[1]) / 4000; math.Abs(frac-0.75) > 0.03 || counts[2] != 0 {
		t.Errorf("counts %v: token 1 drawn %.3f of the time, want 0.75", counts, frac)
	}
	g := New(Params{Temperature: 0, Seed: 5})
	if got := g.Sample([]float32{1, 9, 9}); got != 1 {
		t.Errorf("temperature 0 sampled %d, want 1", got)
	}
	k1 := New(Params{Temperature: 5, TopK: 1, Seed: 3})
	for range 50 {
		if got := k1.Sample([]float32{1, 2, 9, 3}); got != 2 {
			t.Fatalf("top-k 1 sampled %d, want 2", got)
		}
	}
}

func TestDraw(t *testing.T) {
	p := []float64{0.25, 0.5, 0.25}
	for _, c := range []struct {
		u    float64
		want int
	}{{0, 0}, {0.2499, 0}, {0.25, 1}, {0.74, 1}, {0.76, 2}, {0.9999, 2}, {1.5, 2}} {
		if got := Draw(p, c.u); got != c.want {
			t.Errorf("Draw(%v) = %d, want %d", c.u, got, c.want)
		}
	}
}

// TestSamplerPlainGreedy: Plain holds for temperature/top-k/top-p settings alone (and min-p
// only when greedy); Greedy for plain samplers at temperature 0 only.
func TestSamplerPlainGreedy(t *testing.T) {
	for _, c := range []struct {
		name          string
		s             *Sampler
		plain, greedy bool
	}{
		{"greedy", New(Params{}), true, true},
		{"greedy with top-k and min-p", New(Params{TopK: 5, MinP: 0.1}), true, true},
		{"greedy with a logit bias", New(Params{}, LogitBias{3: 1}), false, false},
		{"sampled", New(Params{Temperature: 0.8, TopK: 40, TopP: 0.9}), true, false},
		{"sampled with min-p", New(Params{Temperature: 0.8, MinP: 0.1}), false, false},
		{"sampled with a logit bias", New(Params{Temperature: 1}, LogitBias{3: 1}), false, false},
	} {
		if got := c.s.Plain(); got != c.plain {
			t.Errorf("%s: Plain() = %v, want %v", c.name, got, c.plain)
		}
		if got := c.s.Greedy(); got != c.greedy {
			t.Errorf("%s: Greedy() = %v, want %v", c.name, got, c.greedy)
		}
	}
}
