package backend

import "testing"

// TestALiBiSlopes holds the slopes to the ALiBi paper's rule for maximum bias 8: the
// powers of 2^(-8/n) for n heads a power of two, then the odd powers of 2^(-4/n) for the
// heads beyond the largest power of two n.
func TestALiBiSlopes(t *testing.T) {
	for heads, want := range map[int][]float32{
		1: {1.0 / 256},
		4: {1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256},
		6: {1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256, 1.0 / 2, 1.0 / 8},
		8: {1.0 / 2, 1.0 / 4, 1.0 / 8, 1.0 / 16, 1.0 / 32, 1.0 / 64, 1.0 / 128, 1.0 / 256},
	} {
		got := ALiBiSlopes(heads, 8)
		for h := range want {
			if d := got[h] - want[h]; d > 1e-7 || d < -1e-7 {
				t.Errorf("%d heads: slopes %v, want %v", heads, got, want)
				break
			}
		}
	}
}
