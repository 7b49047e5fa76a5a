package cuda

import "testing"

// TestSupportsFP8: FP8 weights need compute capability 8.9 (Ada) or newer.
func TestSupportsFP8(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		want         bool
	}{{7, 5, false}, {8, 0, false}, {8, 6, false}, {8, 9, true}, {9, 0, true}, {10, 0, true}, {12, 0, true}} {
		if got := (DeviceInfo{Major: c.major, Minor: c.minor}).SupportsFP8(); got != c.want {
			t.Errorf("compute capability %d.%d: SupportsFP8 %v, want %v", c.major, c.minor, got, c.want)
		}
	}
}

// TestFP8Shape: the FP8 launchers refuse rows that are not a multiple of 16 values and
// buffers of the wrong types before anything is launched.
func TestFP8Shape(t *testing.T) {
	w := Buffer{Ptr: 1, DType: FP8, Len: 4 * 32}
	s := Buffer{Ptr: 2, DType: F32, Len: 4}
	if err := fp8Shape("t", w, s, 32, 4); err != nil {
		t.Errorf("4 rows of 32: %v", err)
	}
	for name, err := range map[string]error{
		"rows of 40":  fp8Shape("t", Buffer{Ptr: 1, DType: FP8, Len: 160}, s, 40, 4),
		"bf16 scales": fp8Shape("t", w, Buffer{Ptr: 2, DType: BF16, Len: 4}, 32, 4),
		"q8_0 weight": fp8Shape("t", Buffer{Ptr: 1, DType: Q8_0, Len: 128}, s, 32, 4),
		"too short":   fp8Shape("t", Buffer{Ptr: 1, DType: FP8, Len: 100}, s, 32, 4),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
