package quant

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestF16Table(t *testing.T) {
	tests := []struct {
		name string
		f    float32
		h    uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"one third", 1.0 / 3, 0x3555},
		{"largest normal", 65504, 0x7bff},
		{"rounds down to largest", 65519, 0x7bff},
		{"tie rounds up to infinity", 65520, 0x7c00},
		{"overflow", 1e6, 0x7c00},
		{"negative overflow", -1e6, 0xfc00},
		{"smallest normal", 0x1p-14, 0x0400},
		{"largest subnormal", 0x3ffp-24, 0x03ff},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"half of smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"just above half of smallest subnormal", 0x1.000002p-25, 0x0001},
		{"1.5 subnormal units tie to even 2", 0x3p-25, 0x0002},
		{"2.5 subnormal units tie to even 2", 0x5p-25, 0x0002},
		{"subnormal rounds into smallest normal", 0x7ffp-25, 0x0400},
		{"tie to even down", 1 + 0x1p-11, 0x3c00},
		{"tie to even up", 1 + 0x3p-11, 0x3c02},
		{"above tie", 1 + 0x1p-11 + 0x1p-23, 0x3c01},
		{"tiny underflows", 1e-10, 0x0000},
		{"negative tiny underflows", -1e-10, 0x8000},
		{"infinity", float32(math.Inf(1)), 0x7c00},
		{"negative infinity", float32(math.Inf(-1)), 0xfc00},
		{"f32 subnormal", math.SmallestNonzeroFloat32, 0x0000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F32ToF16(tc.f); got != tc.h {
				t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
			}
		})
	}
	decode := []struct {
		h uint16
		f float64
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 0x1p-24}, {0x03ff, 0x3ffp-24},
		{0x0400, 0x1p-14}, {0x3555, 0x1.554p-2}, {0x8001, -0x1p-24}, {0x7c00, math.Inf(1)},
		{0xfc00, math.Inf(-1)},
	}
	for _, tc := range decode {
		if got := F16ToF32(tc.h); float64(got) != tc.f {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", tc.h, got, tc.f)
		}
	}
	if got := F16ToF32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToF32(0x8000) = %g, want -0", got)
	}
}

func isF16NaN(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

// TestF16Exhaustive checks every half: decoding then encoding must give the same bits, NaNs
// must stay NaN, and decoded values must increase strictly with the bits of non-negative halves.
func TestF16Exhaustive(t *testing.T) {
	prev := math.Inf(-1)
	for h := range 1 << 16 {
		h := uint16(h)
		f := F16ToF32(h)
		if isF16NaN(h) {
			if f == f {
				t.Fatalf("F16ToF32(%#04x) = %g, want NaN", h, f)
			}
			if back := F32ToF16(f); !isF16NaN(back) {
				t.Fatalf("F32ToF16(NaN from %#04x) = %#04x, want NaN", h, back)
			}
			continue
		}
		if back := F32ToF16(f); back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x) = %g) = %#04x", h, f, back)
		}
	}
	// Strictly increasing over the non-negative halves 0x0000 ... 0x7c00 (infinity).
	for h := uint16(0); h <= 0x7c00; h++ {
		v := float64(F16ToF32(h))
		if v <= prev {
			t.Fatalf("F16ToF32(%#04x) = %g not above the previous %g", h, v, prev)
		}
		prev = v
	}
}

// TestF16RoundingDifferential compares F32ToF16 on random float32 values with a brute-force
// nearest-half search done in float64.
func TestF16RoundingDifferential(t *testing.T) {
	var vals []float64 // all finite non-negative halves, increasing
	var bits []uint16
	for h := uint16(0); h < 0x7c00; h++ {
		vals = append(vals, float64(F16ToF32(h)))
		bits = append(bits, h)
	}
	nearest := func(f float64) uint16 {
		a := math.Abs(f)
		var h uint16
		if a >= 65520 { // beyond 65504 + half an ulp (ties go to the even infinity)
			h = 0x7c00
		} else {
			i := sort.SearchFloat64s(vals, a)
			switch {
			case i == len(vals):
				h = bits[len(vals)-1]
			case vals[i] == a || i == 0:
				h = bits[i]
			default:
				lo, hi := vals[i-1], vals[i]
				switch {
				case a-lo < hi-a:
					h = bits[i-1]
				case a-lo > hi-a:
					h = bits[i]
				case bits[i-1]&1 == 0:
					h = bits[i-1]
				default:
					h = bits[i]
				}
			}
		}
		if math.Signbit(f) {
			h |= 0x8000
		}
		return h
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200000 {
		var f float32
		switch r.IntN(3) {
		case 0: // anywhere in and around the half range
			f = float32(math.Ldexp(r.Float64()*2-1, r.IntN(50)-30))
		case 1: // exact ties and near-ties between neighbours
			h := uint16(r.IntN(0x7bff))
			mid := (float64(F16ToF32(h)) + float64(F16ToF32(h+1))) / 2
			f = math.Nextafter32(float32(mid), float32(r.IntN(3)-1)*math.MaxFloat32)
			if r.IntN(2) == 0 {
				f = -f
			}
		default: // random bit patterns (finite only)
			f = math.Float32frombits(r.Uint32())
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				continue
			}
		}
		if got, want := F32ToF16(f), nearest(float64(f)); got != want {
			t.Fatalf("F32ToF16(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

func TestBF16(t *testing.T) {
	tests := []struct {
		f float32
		b uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-2, 0xc000},
		{1 + 0x1p-8, 0x3f80},                  // tie, even stays
		{1 + 0x3p-8, 0x3f82},                  // tie, odd rounds up
		{1 + 0x1p-8 + 0x1p-23, 0x3f81},        // above tie
		{math.MaxFloat32, 0x7f80},             // rounds up to infinity
		{float32(math.Inf(-1)), 0xff80},       // infinity kept
		{math.SmallestNonzeroFloat32, 0x0000}, // tiny subnormal rounds to zero
	}
	for _, tc := range tests {
		if got := F32ToBF16(tc.f); got != tc.b {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", tc.f, got, tc.b)
		}
	}
	// NaN with payload only in the low 16 bits must stay NaN.
	nan := math.Float32frombits(0x7f800001)
	if b := F32ToBF16(nan); BF16ToF32(b) == BF16ToF32(b) {
		t.Errorf("F32ToBF16(NaN) = %#04x, not a NaN", b)
	}
	for b := range 1 << 16 {
		b := uint16(b)
		f := BF16ToF32(b)
		if f != f {
			continue
		}
		if back := F32ToBF16(f); back != b {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", b, back)
		}
	}
	// Differential: the result is one of the two neighbours, the nearer one.
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		f := math.Float32frombits(r.Uint32() & 0x7effffff) // finite, positive, below the top binade
		b := F32ToBF16(f)
		lo := math.Float32frombits(math.Float32bits(f) &^ 0xffff)
		hi := math.Float32frombits(math.Float32bits(lo) + 0x10000)
		dl, dh := float64(f)-float64(lo), float64(hi)-float64(f)
		want := uint16(math.Float32bits(lo) >> 16)
		if dh < dl || (dh == dl && want&1 == 1) {
			want++
		}
		if b != want {
			t.Fatalf("F32ToBF16(%g) = %#04x, want %#04x", f, b, want)
		}
	}
}
