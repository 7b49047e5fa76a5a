package quant

import "math"

// FP8Format is an 8-bit floating-point format: a sign bit, ExpBits exponent bits of bias
// Bias and ManBits mantissa bits, with subnormals. It is the one definition of the FP8
// formats kvasir converts: FP8 weights (E4M3, e4m3.go) and the FP8 KV cache (E4M3, E5M2).
type FP8Format struct {
	Name             string
	ExpBits, ManBits int
	Bias             int
	// Max is the largest finite value; MaxCode its code.
	Max     float32
	MaxCode byte
	table   [256]float32
}

// E4M3 is FP8 E4M3 as NVIDIA's float8_e4m3fn: 4 exponent bits of bias 7, 3 mantissa bits,
// no infinities, largest 448; codes 0x7f and 0xff are NaN.
var E4M3 = newFP8("e4m3", 4, 3, 7, 0x7e, true)

// E5M2 is FP8 E5M2 (IEEE-like: 5 exponent bits of bias 15, 2 mantissa bits, largest finite
// 57344; the top exponent holds infinities and NaN).
var E5M2 = newFP8("e5m2", 5, 2, 15, 0x7b, false)

func newFP8(name string, eb, mb, bias int, maxCode byte, fn bool) *FP8Format {
	f := &FP8Format{Name: name, ExpBits: eb, ManBits: mb, Bias: bias, MaxCode: maxCode}
	for c := range f.table {
		f.table[c] = f.decode(byte(c), fn)
	}
	f.Max = f.table[maxCode]
	return f
}

// decode returns the value of code c (fn: the top exponent holds finite values, and only
// an all-ones mantissa there is NaN).
func (f *FP8Format) decode(c byte, fn bool) float32 {
	e := int(c>>f.ManBits) & (1<<f.ExpBits - 1)
	m := int(c) & (1<<f.ManBits - 1)
	var v float64
	switch top := 1<<f.ExpBits - 1; {
	case fn && e == top && m == 1<<f.ManBits-1:
		v = math.NaN()
	case !fn && e == top && m == 0:
		v = math.Inf(1)
	case !fn && e == top:
		v = math.NaN()
	case e == 0:
		v = math.Ldexp(float64(m), 1-f.Bias-f.ManBits)
	default:
		v = math.Ldexp(float64(1<<f.ManBits+m), e-f.Bias-f.ManBits)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// Table returns the value of every code, indexed by the code (a lookup table for
// dequantizing kernels).
func (f *FP8Format) Table() *[256]float32 { return &f.table }

// Decode returns the value of code c.
func (f *FP8Format) Decode(c byte) float32 { return f.table[c] }

// Encode returns the code nearest x, ties to the even mantissa; magnitudes beyond Max
// (infinities included) saturate to ±Max, and NaN gives the format's NaN.
func (f *FP8Format) Encode(x float32) byte {
	var sign byte
	if math.Signbit(float64(x)) {
		sign, x = 0x80, -x
	}
	switch {
	case x != x:
		return sign | 0x7f
	case x >= f.Max:
		return sign | f.MaxCode
	}
	emin := 1 - f.Bias
	e := emin
	if x != 0 {
		_, fe := math.Frexp(float64(x)) // x = frac x 2^fe, frac in [0.5, 1)
		e = max(emin, fe-1)
	}
	m := int(math.RoundToEven(math.Ldexp(float64(x), f.ManBits-e)))
	if m >= 1<<(f.ManBits+1) { // rounded up into the next binade
		e, m = e+1, m>>1
	}
	if m < 1<<f.ManBits { // subnormal (or zero): e is emin
		return sign | byte(m)
	}
	code := byte((e+f.Bias)<<f.ManBits | (m - 1<<f.ManBits))
	return sign | min(code, f.MaxCode)
}

// Widen returns how a code's value is formed through a float32, as SIMD code does it: the
// float32 of bits (code&0x7f)<<shift | (code&0x80)<<24, times mul (2^(127-Bias)), is the
// code's value exactly, subnormal codes included (they land on float32 subnormals).
func (f *FP8Format) Widen() (shift int, mul float32) {
	return 23 - f.ManBits, float32(math.Ldexp(1, 127-f.Bias))
}
