package quant

import "math"

// F16ToF32 converts an IEEE 754 binary16 value (given by its bits) to float32. The conversion
// is exact: every half value, subnormals, infinities and NaN payloads included, has an exact
// float32 image.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0:
		// Zero or subnormal: mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	case exp == 0x1f:
		// Infinity (mant == 0) or NaN (payload kept in the high mantissa bits).
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// F32ToF16 converts a float32 to the nearest IEEE 754 binary16 value, rounding ties to even
// (as the F16C instruction VCVTPS2PH does). Values too large become infinities, values too
// small become signed zeros or subnormals, and NaN stays a (quiet) NaN.
func F32ToF16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int32(bits>>23) & 0xff
	mant := bits & 0x7fffff

	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 // unbiased exponent
	if e > 15 {
		return sign | 0x7c00
	}
	if e >= -14 {
		// Normal half candidate: keep 10 mantissa bits, round the 13 dropped bits. A carry
		// out of the mantissa correctly bumps the exponent (and overflows to infinity).
		h := uint32(e+15)<<10 | mant>>13
		h += roundBit(mant, 13, h)
		return sign | uint16(h)
	}
	if e < -25 {
		// Below half of the smallest subnormal (2^-24): rounds to zero.
		return sign
	}
	// Subnormal half: value = m * 2^(e-23) with the implicit bit, in units of 2^-24.
	m := mant | 0x800000
	shift := uint(-(e + 1)) // 14 ... 24
	h := m >> shift
	h += roundBit(m, shift, h)
	return sign | uint16(h)
}

// roundBit returns 1 when dropping the low `shift` bits of m (leaving the truncated value
// kept) must round up under round-to-nearest-even, else 0.
func roundBit(m uint32, shift uint, kept uint32) uint32 {
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && kept&1 == 1) {
		return 1
	}
	return 0
}

// BF16ToF32 converts a bfloat16 value (given by its bits) to float32. The conversion is exact.
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 converts a float32 to the nearest bfloat16 value, rounding ties to even. NaN stays
// NaN (it is quieted so that dropping payload bits cannot turn it into an infinity).
func F32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return uint16(bits>>16) | 0x40
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}
