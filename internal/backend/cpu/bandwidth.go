package cpu

import (
	"time"
)

// ProbeBandwidth measures the memory read bandwidth the pool's threads reach, in GB/s
// (1e9 bytes per second): it allocates a buffer of the given size (make it several times
// the last-level cache) in huge pages where the system gives them (see WeightArena), fills
// it, then times parallel sum-of-squares passes over it and returns the best pass. Returns 0 when bytes is too small to measure.
func ProbeBandwidth(p *Pool, bytes int) float64 {
	b := newBandwidthProbe(bytes)
	if b == nil {
		return 0
	}
	b.pass(p) // warm up: page faults, worker wake-ups
	best := time.Duration(1 << 62)
	for range 5 {
		best = min(best, b.pass(p))
	}
	return b.gbs(best)
}

// bandwidthProbe is ProbeBandwidth's buffer, kept so that benchmarks can interleave probe
// passes with the work they compare against it.
type bandwidthProbe struct {
	buf, partial []float32
}

// probeChunk is how many floats one probe work item reads (256 KiB).
const probeChunk = 1 << 16

func newBandwidthProbe(bytes int) *bandwidthProbe {
	n := bytes / 4
	if n < 1024 {
		return nil
	}
	// In huge pages, as a WeightArena holds the weights that decode streams.
	buf := bytesAsF32(hugeChunk(4 * n))[:n]
	b := &bandwidthProbe{buf: buf, partial: make([]float32, (n+probeChunk-1)/probeChunk)}
	for i := range b.buf {
		b.buf[i] = float32(i&1023) * 1e-3
	}
	return b
}

// pass reads the whole buffer once on the pool and returns how long it took.
func (b *bandwidthProbe) pass(p *Pool) time.Duration {
	n := len(b.buf)
	start := time.Now()
	p.Run(len(b.partial), func(s, e int) {
		for i := s; i < e; i++ {
			c := b.buf[i*probeChunk : min((i+1)*probeChunk, n)]
			b.partial[i] = p.kern.dotF32(c, c)
		}
	})
	return time.Since(start)
}

// gbs converts the time of one pass to GB/s (0 for a non-positive time).
func (b *bandwidthProbe) gbs(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(4*len(b.buf)) / d.Seconds() / 1e9
}
