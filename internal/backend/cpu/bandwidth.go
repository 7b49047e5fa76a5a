package cpu

import (
	"time"
)

// ProbeBandwidth measures the memory read bandwidth the pool's threads reach, in GB/s
// (1e9 bytes per second): it allocates a buffer of the given size (make it several times
// the last-level cache), fills it, then times parallel sum-of-squares passes over it and
// returns the best pass. Returns 0 when bytes is too small to measure.
func ProbeBandwidth(p *Pool, bytes int) float64 {
	n := bytes / 4
	if n < 1024 {
		return 0
	}
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = float32(i&1023) * 1e-3
	}
	const chunk = 1 << 16 // floats per work item (256 KiB)
	items := (n + chunk - 1) / chunk
	partial := make([]float32, items)
	pass := func() {
		p.Run(items, func(start, end int) {
			for i := start; i < end; i++ {
				s := buf[i*chunk : min((i+1)*chunk, n)]
				partial[i] = p.kern.dotF32(s, s)
			}
		})
	}
	pass() // warm up: page faults, worker wake-ups
	best := time.Duration(1 << 62)
	for range 5 {
		start := time.Now()
		pass()
		best = min(best, time.Since(start))
	}
	if best <= 0 {
		return 0
	}
	return float64(4*n) / best.Seconds() / 1e9
}
