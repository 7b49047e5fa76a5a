package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals returns when each of n requests is sent, from the start, for a target rate in
// requests per second: all at once for an infinite rate; otherwise gaps drawn from a gamma
// distribution of shape burstiness and mean 1/rate (burstiness 1 is a Poisson process,
// lower is burstier, higher more even, +Inf evenly spaced). As vLLM does, the gaps are then
// scaled so that the last request is sent at n/rate, which steadies throughput across seeds.
func Arrivals(n int, rate, burstiness float64, rng *rand.Rand) ([]time.Duration, error) {
	if rate <= 0 || math.IsNaN(rate) {
		return nil, fmt.Errorf("request rate %g: need a positive rate (inf for all at once)", rate)
	}
	if burstiness <= 0 || math.IsNaN(burstiness) {
		return nil, fmt.Errorf("burstiness %g: need a positive factor", burstiness)
	}
	out := make([]time.Duration, n)
	if math.IsInf(rate, 1) || n == 0 {
		return out, nil
	}
	ts := make([]float64, n)
	sum := 0.0
	for i := range ts {
		gap := 1 / rate
		if !math.IsInf(burstiness, 1) {
			gap = Gamma(rng, burstiness, 1/(rate*burstiness))
		}
		sum += gap
		ts[i] = sum
	}
	scale := 1.0
	if sum > 0 {
		scale = float64(n) / rate / sum
	}
	for i, t := range ts {
		out[i] = time.Duration(t * scale * float64(time.Second))
	}
	return out, nil
}

// Gamma draws from the gamma distribution with the given shape and scale (Marsaglia and
// Tsang's method; shapes below 1 through Gamma(shape+1) * U^(1/shape)).
func Gamma(rng *rand.Rand, shape, scale float64) float64 {
	if shape == 1 {
		return rng.ExpFloat64() * scale
	}
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return Gamma(rng, shape+1, scale) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v * scale
		}
	}
}
