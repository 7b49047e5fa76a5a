package kvquant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

func TestFP8KnownCodes(t *testing.T) {
	for _, tc := range []struct {
		f    *quant.FP8Format
		code byte
		want float64
	}{
		{quant.E4M3, 0x38, 1}, {quant.E4M3, 0x7e, 448}, {quant.E4M3, 0xfe, -448}, {quant.E4M3, 0x01, math.Ldexp(1, -9)},
		{quant.E4M3, 0x08, math.Ldexp(1, -6)}, {quant.E4M3, 0x07, 7 * math.Ldexp(1, -9)}, {quant.E4M3, 0x3c, 1.5},
		{quant.E5M2, 0x3c, 1}, {quant.E5M2, 0x7b, 57344}, {quant.E5M2, 0x01, math.Ldexp(1, -16)}, {quant.E5M2, 0x04, math.Ldexp(1, -14)},
		{quant.E5M2, 0x7c, math.Inf(1)}, {quant.E5M2, 0xfc, math.Inf(-1)}, {quant.E5M2, 0x3e, 1.5},
	} {
		if got := tc.f.Decode(tc.code); float64(got) != tc.want {
			t.Errorf("%s %#02x = %v, want %v", tc.f.Name, tc.code, got, tc.want)
		}
	}
	if !math.IsNaN(float64(quant.E4M3.Decode(0x7f))) || !math.IsNaN(float64(quant.E4M3.Decode(0xff))) || !math.IsNaN(float64(quant.E5M2.Decode(0x7d))) {
		t.Error("NaN codes do not decode to NaN")
	}
	if quant.E4M3.Max != 448 || quant.E5M2.Max != 57344 {
		t.Errorf("max %v, %v", quant.E4M3.Max, quant.E5M2.Max)
	}
}

// nearest is the reference encoder: the finite code nearest x by exhaustive search, ties
// to the even code (even mantissa), beyond Max saturating.
func nearest(f *quant.FP8Format, x float32) byte {
	if math.Abs(float64(x)) >= float64(f.Max) {
		if math.Signbit(float64(x)) {
			return 0x80 | f.MaxCode
		}
		return f.MaxCode
	}
	best, bestD := byte(0), math.Inf(1)
	for c := range 256 {
		v := f.Decode(byte(c))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Signbit(float64(v)) != math.Signbit(float64(x)) {
			continue
		}
		d := math.Abs(float64(v) - float64(x))
		if d < bestD || (d == bestD && c&1 == 0) {
			best, bestD = byte(c), d
		}
	}
	return best
}

func TestFP8EncodeIsNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range []*quant.FP8Format{quant.E4M3, quant.E5M2} {
		var xs []float32
		for c := range 256 { // every code, and every midpoint between neighbours
			v := f.Decode(byte(c))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				continue
			}
			xs = append(xs, v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1))))
			if n := f.Decode(byte(c) + 1); c&0x7f < int(f.MaxCode) {
				xs = append(xs, (v+n)/2)
			}
		}
		for range 20000 {
			xs = append(xs, float32(r.NormFloat64()*math.Exp2(r.Float64()*40-24)))
		}
		xs = append(xs, 0, float32(math.Copysign(0, -1)), 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)))
		for _, x := range xs {
			if got, want := f.Encode(x), nearest(f, x); got != want {
				t.Fatalf("%s: Encode(%g) = %#02x (%g), want %#02x (%g)", f.Name, x, got, f.Decode(got), want, f.Decode(want))
			}
		}
		if c := f.Encode(float32(math.NaN())); !math.IsNaN(float64(f.Decode(c))) {
			t.Errorf("%s: Encode(NaN) = %#02x", f.Name, c)
		}
	}
}

func TestRowBytes(t *testing.T) {
	for _, tc := range []struct {
		t        quant.Type
		hd, want int
	}{
		{quant.F32, 64, 256}, {quant.F16, 64, 128}, {quant.BF16, 8, 16},
		{quant.KVInt8, 128, 128 + 16}, {quant.KVFP8E4M3, 64, 64 + 8}, {quant.KVFP8E5M2, 8, 8 + 4},
		{quant.KVInt8, 48, 48 + 4}, {quant.Q4_0, 64, 0},
	} {
		if got := RowBytes(tc.t, tc.hd); got != tc.want {
			t.Errorf("RowBytes(%s, %d) = %d, want %d", tc.t, tc.hd, got, tc.want)
		}
	}
}

// TestQuantizeError checks every type's round trip against its bound: int8 is off by at
// most half a step (scale/2), FP8 by half an ulp of the scaled value (2^-(ManBits+1)
// relative) or half the smallest subnormal step, and every group's largest magnitude is
// kept to rounding of its scale.
func TestQuantizeError(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 16, 64, 96} {
		g := Group(hd)
		src := make([]float32, 5*hd)
		for i := range src {
			src[i] = float32(r.NormFloat64() * math.Exp2(float64(i%7-3)))
		}
		clear(src[hd : 2*hd]) // a zero head vector
		src[3*hd] = 1e4       // an outlier
		for _, typ := range []quant.Type{quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
			c, err := NewCodec(typ)
			if err != nil {
				t.Fatal(err)
			}
			codes, scales := make([]byte, len(src)), make([]float32, len(src)/g)
			c.Quantize(codes, scales, src, g)
			got := make([]float32, len(src))
			c.Dequantize(got, codes, scales, g)
			for i, x := range src {
				s := float64(scales[i/g])
				var bound float64
				if c.fp8 == nil {
					bound = s / 2 * (1 + 1e-6)
				} else {
					bound = math.Max(math.Abs(float64(x))*math.Ldexp(1, -c.fp8.ManBits-1), s*math.Ldexp(1, -c.fp8.Bias-c.fp8.ManBits)) * (1 + 1e-5)
				}
				if d := math.Abs(float64(got[i]) - float64(x)); d > bound {
					t.Fatalf("%s hd %d: element %d: %g reads back %g (scale %g): off by %g > %g", typ, hd, i, x, got[i], s, d, bound)
				}
			}
			for i := hd; i < 2*hd; i++ {
				if got[i] != 0 {
					t.Fatalf("%s: zero group reads back %g", typ, got[i])
				}
			}
		}
	}
	if _, err := NewCodec(quant.F16); err == nil {
		t.Error("NewCodec(F16) accepted")
	}
}

// TestFP8Widen: the float32 bit arithmetic of Widen gives every finite code's value.
func TestFP8Widen(t *testing.T) {
	for _, f := range []*quant.FP8Format{quant.E4M3, quant.E5M2} {
		shift, mul := f.Widen()
		for c := range 256 {
			want := f.Decode(byte(c))
			if math.IsNaN(float64(want)) || math.IsInf(float64(want), 0) {
				continue
			}
			got := math.Float32frombits(uint32(c&0x7f)<<shift|uint32(c&0x80)<<24) * mul
			if got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
				t.Fatalf("%s %#02x: widened %g, want %g", f.Name, c, got, want)
			}
		}
	}
}
