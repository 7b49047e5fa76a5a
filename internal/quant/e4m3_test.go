package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nearestE4M3 is the brute-force reference of F32ToE4M3: the finite E4M3 value nearest x
// (ties to the even byte), after clamping to ±E4M3Max.
func nearestE4M3(x float32) uint8 {
	if x != x {
		if math.Signbit(float64(x)) {
			return 0xFF
		}
		return 0x7F
	}
	c := math.Max(-E4M3Max, math.Min(E4M3Max, float64(x)))
	best, bestD := uint8(0), math.Inf(1)
	for b := range 256 {
		v := float64(E4M3ToF32(uint8(b)))
		if v != v {
			continue
		}
		d := math.Abs(v - c)
		if d < bestD || (d == bestD && b&1 == 0 && best&1 == 1) {
			best, bestD = uint8(b), d
		}
	}
	if best == 0x80 && !math.Signbit(float64(x)) {
		best = 0 // +0 and -0 are equally near: keep x's sign
	}
	if best == 0 && math.Signbit(float64(x)) {
		best = 0x80
	}
	return best
}

func TestE4M3Values(t *testing.T) {
	for _, c := range []struct {
		b uint8
		v float32
	}{{0x00, 0}, {0x08, 1.0 / 64}, {0x01, 1.0 / 512}, {0x38, 1}, {0x7E, 448}, {0xFE, -448}, {0x3C, 1.5}, {0xC0, -2}} {
		if got := E4M3ToF32(c.b); got != c.v {
			t.Errorf("E4M3ToF32(%#x) = %v, want %v", c.b, got, c.v)
		}
		if got := F32ToE4M3(c.v); got != c.b {
			t.Errorf("F32ToE4M3(%v) = %#x, want %#x", c.v, got, c.b)
		}
	}
	for _, b := range []uint8{0x7F, 0xFF} {
		if v := E4M3ToF32(b); v == v {
			t.Errorf("E4M3ToF32(%#x) = %v, want NaN", b, v)
		}
	}
	for _, x := range []float32{449, 1e9, float32(math.Inf(1))} {
		if got := F32ToE4M3(x); got != 0x7E {
			t.Errorf("F32ToE4M3(%v) = %#x, want saturation to 0x7e", x, got)
		}
		if got := F32ToE4M3(-x); got != 0xFE {
			t.Errorf("F32ToE4M3(%v) = %#x, want saturation to 0xfe", -x, got)
		}
	}
}

// TestE4M3RoundTrip checks that every finite byte decodes and encodes back to itself.
func TestE4M3RoundTrip(t *testing.T) {
	for b := range 256 {
		v := E4M3ToF32(uint8(b))
		if v != v {
			continue
		}
		if got := F32ToE4M3(v); got != uint8(b) {
			t.Errorf("byte %#x: %v encodes to %#x", b, v, got)
		}
	}
}

// TestE4M3Nearest compares F32ToE4M3 with the brute-force nearest value on random floats
// of every magnitude and on the midpoints between neighbouring E4M3 values (the ties).
func TestE4M3Nearest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var xs []float32
	for b := range 0x7E {
		lo, hi := float64(E4M3ToF32(uint8(b))), float64(E4M3ToF32(uint8(b+1)))
		mid := float32((lo + hi) / 2)
		xs = append(xs, mid, -mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000))
	}
	for range 20000 {
		xs = append(xs, float32(r.NormFloat64()*math.Ldexp(1, r.IntN(30)-16)))
	}
	for _, x := range xs {
		if got, want := F32ToE4M3(x), nearestE4M3(x); got != want {
			t.Fatalf("F32ToE4M3(%v) = %#x (%v), want %#x (%v)", x, got, E4M3ToF32(got), want, E4M3ToF32(want))
		}
	}
}

// TestFP8Row checks the FP8 row type: its size, the per-row scale and the round trip error
// bound of E4M3's 3 mantissa bits (half an ulp: 1/16 relative, for normal values).
func TestFP8Row(t *testing.T) {
	const n = 37
	if rb, err := FP8.RowBytes(n); err != nil || rb != n+4 {
		t.Fatalf("FP8.RowBytes(%d) = %d, %v; want %d", n, rb, err, n+4)
	}
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, n)
	var amax float32
	for i := range src {
		src[i] = float32(r.NormFloat64() * 0.02)
		amax = max(amax, float32(math.Abs(float64(src[i]))))
	}
	row := make([]byte, n+4)
	if err := Quantize(FP8, src, row); err != nil {
		t.Fatal(err)
	}
	if s := FP8RowScale(row); s != amax/E4M3Max {
		t.Fatalf("scale %v, want %v", s, amax/E4M3Max)
	}
	back := make([]float32, n)
	if err := Dequantize(FP8, row, back); err != nil {
		t.Fatal(err)
	}
	scale := amax / E4M3Max
	for i, v := range src {
		bound := math.Max(math.Abs(float64(v))/16, float64(scale)/1024) * 1.0001
		if d := math.Abs(float64(back[i] - v)); d > bound {
			t.Errorf("element %d: %v came back as %v (error %g > %g)", i, v, back[i], d, bound)
		}
	}
	zero := make([]float32, n)
	if err := Quantize(FP8, zero, row); err != nil {
		t.Fatal(err)
	}
	for i, b := range row {
		if b != 0 {
			t.Fatalf("a row of zeros: byte %d is %#x", i, b)
		}
	}
	if _, err := ParseType("fp8"); err == nil {
		t.Error(`ParseType("fp8") succeeded: FP8 is not a GGML type`)
	}
	if FP8.GGML() || !Q8_0.GGML() {
		t.Error("GGML() is wrong for FP8 or Q8_0")
	}
}
