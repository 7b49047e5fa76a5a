package model

import (
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
)

func ropeConfig(s format.RopeScaling) format.Config {
	return format.Config{HeadDim: 64, RopeDim: 64, RopeTheta: 10000, Scaling: s}
}

// TestRopeScaling checks the inverse frequencies each scaling type gives against values
// worked out by hand.
func TestRopeScaling(t *testing.T) {
	base := func(i int) float64 { return math.Pow(10000, -float64(2*i)/64) }
	near := func(a float32, b float64) bool { return math.Abs(float64(a)-b) <= 1e-6*math.Abs(b) }

	plain, err := newRope(ropeConfig(format.RopeScaling{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range plain.invFreq {
		if !near(f, base(i)) {
			t.Fatalf("pair %d: inverse frequency %g, want %g", i, f, base(i))
		}
	}
	lin, err := newRope(ropeConfig(format.RopeScaling{Type: "linear", Factor: 4}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !near(lin.invFreq[5], base(5)/4) {
		t.Errorf("linear: pair 5: %g, want %g", lin.invFreq[5], base(5)/4)
	}
	// YaRN, factor 4 over an original context of 2048: the fastest pairs extrapolate
	// (unchanged), the slowest interpolate (divided by 4), and cos/sin scale by
	// 0.1 ln 4 + 1.
	y, err := newRope(ropeConfig(format.RopeScaling{Type: "yarn", Factor: 4, OriginalContextLen: 2048}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !near(y.invFreq[0], base(0)) || !near(y.invFreq[31], base(31)/4) {
		t.Errorf("yarn: pair 0 %g (want %g), pair 31 %g (want %g)", y.invFreq[0], base(0), y.invFreq[31], base(31)/4)
	}
	if want := 0.1*math.Log(4) + 1; !near(y.mscale, want) {
		t.Errorf("yarn: attention factor %g, want %g", y.mscale, want)
	}
	// Llama 3 scaling from the config equals the same divisors given as a tensor.
	l3 := format.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContextLen: 8192}
	c := ropeConfig(l3)
	fromCfg, err := newRope(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Scaling = format.RopeScaling{}
	fromTensor, err := newRope(c, format.Llama3RopeFreqs(ropeConfig(l3)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range fromCfg.invFreq {
		if fromCfg.invFreq[i] != fromTensor.invFreq[i] {
			t.Fatalf("llama3: pair %d: %g from the config, %g from divisors", i, fromCfg.invFreq[i], fromTensor.invFreq[i])
		}
	}
	if !near(fromCfg.invFreq[31], base(31)/8) || !near(fromCfg.invFreq[0], base(0)) {
		t.Errorf("llama3: pair 0 %g, pair 31 %g", fromCfg.invFreq[0], fromCfg.invFreq[31])
	}
	for _, bad := range []format.RopeScaling{
		{Type: "linear", Factor: 0},
		{Type: "dynamic", Factor: 2},
		{Type: "yarn", Factor: 2},
		{Type: "llama3", Factor: 8},
		{Type: "weird", Factor: 2},
	} {
		if _, err := newRope(ropeConfig(bad), nil); err == nil {
			t.Errorf("scaling %+v was accepted", bad)
		}
	}
	if _, err := newRope(ropeConfig(format.RopeScaling{}), []float32{1, 2}); err == nil {
		t.Error("a divisor tensor of the wrong length was accepted")
	}
}

// TestRopeRotation: both layouts rotate the right pairs by the right angle.
func TestRopeRotation(t *testing.T) {
	c := format.Config{HeadDim: 4, RopeDim: 4, RopeTheta: 10000}
	r, err := newRope(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cos, sin := make([]float32, 2), make([]float32, 2)
	r.angles(3, cos, sin)
	// Pair 0 turns by 3 radians, pair 1 by 3/100.
	v := []float32{1, 0, 1, 0}
	r.apply(v, cos, sin)
	want := []float64{math.Cos(3), math.Sin(3), math.Cos(0.03), math.Sin(0.03)}
	for i := range v {
		if math.Abs(float64(v[i])-want[i]) > 1e-6 {
			t.Fatalf("interleaved: %v, want %v", v, want)
		}
	}
	r.neox = true
	v = []float32{1, 1, 0, 0}
	r.apply(v, cos, sin)
	want = []float64{math.Cos(3), math.Cos(0.03), math.Sin(3), math.Sin(0.03)}
	for i := range v {
		if math.Abs(float64(v[i])-want[i]) > 1e-6 {
			t.Fatalf("neox: %v, want %v", v, want)
		}
	}
}
