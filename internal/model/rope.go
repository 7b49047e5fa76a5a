package model

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// rope holds the rotary frequencies of a model: one inverse frequency per rotated pair of
// a head's dimensions, with the model's long-context scaling already applied.
type rope struct {
	invFreq []float32 // len RopeDim/2
	dim     int       // rotated dimensions per head
	neox    bool      // pairs (i, i+dim/2) instead of (2i, 2i+1)
	// mscale multiplies cos and sin (YaRN's attention factor); 1 otherwise.
	mscale float32
}

// newRope computes the rotary frequencies of c. divisors, when not nil, are per-pair
// frequency divisors from the file (GGUF rope_freqs.weight, Llama 3 scaling).
func newRope(c format.Config, divisors []float32) (*rope, error) {
	half := c.RopeDim / 2
	mscale := 1.0
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.RopeDim))
	}
	switch s := c.Scaling; {
	case divisors != nil:
		if len(divisors) != half {
			return nil, fmt.Errorf("rope: %d frequency divisors for %d pairs", len(divisors), half)
		}
		for i := range inv {
			inv[i] /= float64(divisors[i])
		}
	case s.Type == "" || s.Type == "none":
	case s.Type == "llama3":
		if s.OriginalContextLen <= 0 || s.HighFreqFactor <= s.LowFreqFactor || s.LowFreqFactor <= 0 {
			return nil, fmt.Errorf("rope: llama3 scaling with original context %d, low/high frequency factors %g/%g", s.OriginalContextLen, s.LowFreqFactor, s.HighFreqFactor)
		}
		for i, d := range format.Llama3RopeFreqs(c) {
			inv[i] /= float64(d)
		}
	case s.Type == "linear":
		if s.Factor <= 0 {
			return nil, fmt.Errorf("rope: linear scaling factor %g", s.Factor)
		}
		for i := range inv {
			inv[i] /= s.Factor
		}
	case (s.Type == "yarn" || s.Type == "dynamic") && s.Factor <= 1:
		// A factor of 1 leaves the frequencies as they are.
	case s.Type == "yarn":
		if s.OriginalContextLen <= 0 {
			return nil, fmt.Errorf("rope: yarn scaling needs the original context length")
		}
		mscale = yarn(inv, c.RopeTheta, c.RopeDim, s)
	default:
		return nil, fmt.Errorf("rope: scaling type %q (factor %g) is not supported", s.Type, s.Factor)
	}
	r := &rope{invFreq: make([]float32, half), dim: c.RopeDim, neox: c.RopeStyle == format.RopeNeox, mscale: float32(mscale)}
	for i, f := range inv {
		r.invFreq[i] = float32(f)
	}
	return r, nil
}

// angles writes cos and sin of the rotation angles of position pos, one per pair. The
// angle is formed in float32 (pos * inverse frequency), as llama2.c and llama.cpp do, so
// that long generations follow the same path.
func (r *rope) angles(pos int, cos, sin []float32) {
	for i, f := range r.invFreq {
		a := float32(pos) * f
		s, c := math.Sincos(float64(a))
		cos[i], sin[i] = float32(c)*r.mscale, float32(s)*r.mscale
	}
}

// apply rotates one head vector v (at least r.dim long) by the angles in cos and sin. It is
// the plain form the reference path uses.
func (r *rope) apply(v, cos, sin []float32) {
	half := r.dim / 2
	for i := range half {
		var a, b *float32
		if r.neox {
			a, b = &v[i], &v[i+half]
		} else {
			a, b = &v[2*i], &v[2*i+1]
		}
		x, y := *a, *b
		*a = x*cos[i] - y*sin[i]
		*b = x*sin[i] + y*cos[i]
	}
}

// yarn applies YaRN scaling to the inverse frequencies inv (in place), as Hugging Face's
// _compute_yarn_parameters does: high-frequency pairs (many rotations within the original
// context) keep their frequency, low-frequency ones are interpolated (divided by Factor),
// with a linear ramp between. It returns the attention factor that scales cos and sin.
func yarn(inv []float64, theta float64, dim int, s format.RopeScaling) float64 {
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	// The pair index at which a frequency makes the given number of rotations over the
	// original context.
	corr := func(rotations float64) float64 {
		return float64(dim) * math.Log(float64(s.OriginalContextLen)/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	low := max(math.Floor(corr(betaFast)), 0)
	high := min(math.Ceil(corr(betaSlow)), float64(dim-1))
	if low == high {
		high += 0.001
	}
	for i := range inv {
		ramp := min(max((float64(i)-low)/(high-low), 0), 1)
		extrapolate := 1 - ramp
		inv[i] = inv[i]/s.Factor*(1-extrapolate) + inv[i]*extrapolate
	}
	if s.AttnFactor > 0 {
		return s.AttnFactor
	}
	return 0.1*math.Log(s.Factor) + 1
}
