package cpu

import "math"

// Constants of the float32 exponential (Cephes expf): inputs are clamped to
// [expLo, expHi], reduced by n = round(x/ln 2) with ln 2 split in two parts, and e^r is a
// degree-6 polynomial on |r| <= ln2/2.
const (
	expHi    = 88.0
	expLo    = -87.3
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
)

// expGeneric sets dst[i] = e^src[i] (float32, relative error about 2e-7; results saturate at
// e^88 and e^-87.3; NaNs propagate). It is the scalar twin of the SIMD exp kernels.
func expGeneric(dst, src []float32) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = exp32(x)
	}
}

// exp32 is one value of expGeneric.
func exp32(x float32) float32 {
	if x > expHi {
		x = expHi
	}
	if x < expLo {
		x = expLo
	}
	n := float32(math.RoundToEven(float64(x * expLog2e)))
	r := x - n*expC1
	r -= n * expC2
	p := float32(expP0)
	p = p*r + expP1
	p = p*r + expP2
	p = p*r + expP3
	p = p*r + expP4
	p = p*r + expP5
	y := p*(r*r) + r + 1
	if x != x {
		return x
	}
	return math.Float32frombits(math.Float32bits(y) + uint32(int32(n))<<23)
}
