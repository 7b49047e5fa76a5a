package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// gapStats returns the mean and coefficient of variation of the gaps between arrivals.
func gapStats(at []time.Duration) (mean, cv float64) {
	prev := 0.0
	gaps := make([]float64, len(at))
	for i, a := range at {
		gaps[i] = a.Seconds() - prev
		prev = a.Seconds()
	}
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(len(gaps))
	v := 0.0
	for _, g := range gaps {
		v += (g - mean) * (g - mean)
	}
	return mean, math.Sqrt(v/float64(len(gaps))) / mean
}

func TestArrivalsStatistics(t *testing.T) {
	const n, rate = 20000, 10.0
	for _, c := range []struct {
		burst, cv float64
	}{
		{1, 1},    // Poisson: exponential gaps, CV 1
		{4, 0.5},  // gamma shape k: CV 1/sqrt(k)
		{0.25, 2}, // bursty
		{math.Inf(1), 0},
	} {
		at, err := Arrivals(n, rate, c.burst, rand.New(rand.NewPCG(42, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSorted(at) {
			t.Errorf("burstiness %g: arrivals not in order", c.burst)
		}
		// Scaled so that the last one is sent at n/rate exactly.
		if d := at[n-1].Seconds() - n/rate; math.Abs(d) > 1e-6 {
			t.Errorf("burstiness %g: last arrival %v, want %gs", c.burst, at[n-1], n/rate)
		}
		mean, cv := gapStats(at)
		if math.Abs(mean-1/rate) > 1e-6 {
			t.Errorf("burstiness %g: mean gap %g, want %g", c.burst, mean, 1/rate)
		}
		if math.Abs(cv-c.cv) > 0.05*max(c.cv, 0.2) {
			t.Errorf("burstiness %g: gap CV %.3f, want %.3f", c.burst, cv, c.cv)
		}
		// Poisson counts per second: mean 10, variance 10 (index of dispersion 1).
		if c.burst == 1 {
			counts := make([]float64, int(n/rate))
			for _, a := range at {
				counts[min(int(a.Seconds()), len(counts)-1)]++
			}
			m, v := 0.0, 0.0
			for _, x := range counts {
				m += x
			}
			m /= float64(len(counts))
			for _, x := range counts {
				v += (x - m) * (x - m)
			}
			v /= float64(len(counts))
			if math.Abs(v/m-1) > 0.15 {
				t.Errorf("Poisson counts per second: mean %.2f variance %.2f", m, v)
			}
		}
	}
}

func TestArrivalsSeeded(t *testing.T) {
	a, _ := Arrivals(100, 5, 1, rand.New(rand.NewPCG(7, 1)))
	b, _ := Arrivals(100, 5, 1, rand.New(rand.NewPCG(7, 1)))
	c, _ := Arrivals(100, 5, 1, rand.New(rand.NewPCG(8, 1)))
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Error("the same seed must give the same arrivals, another seed others")
	}
	inf, err := Arrivals(5, math.Inf(1), 1, rand.New(rand.NewPCG(1, 1)))
	if err != nil || slices.Max(inf) != 0 {
		t.Errorf("infinite rate: %v %v", inf, err)
	}
	for _, bad := range [][2]float64{{0, 1}, {-1, 1}, {math.NaN(), 1}, {1, 0}, {1, -2}} {
		if _, err := Arrivals(3, bad[0], bad[1], rand.New(rand.NewPCG(1, 1))); err == nil {
			t.Errorf("rate %g burstiness %g accepted", bad[0], bad[1])
		}
	}
}

func TestGammaMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shape := range []float64{0.3, 1, 2.5, 9} {
		const n, scale = 50000, 2.0
		m, v := 0.0, 0.0
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = Gamma(rng, shape, scale)
			m += xs[i]
		}
		m /= n
		for _, x := range xs {
			v += (x - m) * (x - m)
		}
		v /= n
		if math.Abs(m-shape*scale) > 0.03*shape*scale || math.Abs(v-shape*scale*scale) > 0.08*shape*scale*scale {
			t.Errorf("shape %g: mean %.3f var %.3f, want %.3f and %.3f", shape, m, v, shape*scale, shape*scale*scale)
		}
	}
}
