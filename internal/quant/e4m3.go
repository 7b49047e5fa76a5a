package quant

import (
	"encoding/binary"
	"math"
)

// E4M3 is the OCP 8-bit float "E4M3FN" (PyTorch's float8_e4m3fn): 1 sign bit, 4 exponent
// bits with bias 7 and 3 mantissa bits, no infinities, and NaN only as S.1111.111. Its
// largest finite magnitude is E4M3Max; its smallest, the subnormal 2^-9.
//
// This file is the one place kvasir converts E4M3: the FP8 weight type below and any
// other user (an FP8 KV cache) call E4M3ToF32 and F32ToE4M3.

// E4M3Max is the largest finite E4M3 magnitude, 1.75 * 2^8.
const E4M3Max = 448

// e4m3NaN is the positive NaN byte (0xFF is the negative one).
const e4m3NaN = 0x7F

// e4m3Table holds the value of every E4M3 byte.
var e4m3Table = func() (t [256]float32) {
	for b := range t {
		t[b] = e4m3Decode(uint8(b))
	}
	return t
}()

// E4M3Table returns the value of every E4M3 byte, indexed by the byte (a lookup table for
// dequantizing kernels).
func E4M3Table() *[256]float32 { return &e4m3Table }

// e4m3Decode is the definition E4M3ToF32 tabulates.
func e4m3Decode(b uint8) float32 {
	e, m := int(b>>3)&15, float64(b&7)
	var v float64
	switch {
	case e == 15 && m == 7:
		v = math.NaN()
	case e == 0:
		v = m / 8 * math.Ldexp(1, -6)
	default:
		v = (1 + m/8) * math.Ldexp(1, e-7)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// E4M3ToF32 returns the value of the E4M3 byte b (exactly; NaN for the NaN bytes).
func E4M3ToF32(b uint8) float32 { return e4m3Table[b] }

// F32ToE4M3 rounds x to the nearest E4M3 value, ties to even, saturating: magnitudes above
// E4M3Max (infinities too) become ±E4M3Max, as vLLM's and PyTorch's saturating casts do.
// NaN becomes the E4M3 NaN.
func F32ToE4M3(x float32) uint8 {
	bits := math.Float32bits(x)
	sign := uint8(bits>>24) & 0x80
	a := math.Float32frombits(bits &^ (1 << 31))
	switch {
	case a != a:
		return sign | e4m3NaN
	case a >= E4M3Max:
		return sign | 0x7E
	case a < 1.0/64: // below the smallest normal 2^-6: multiples of 2^-9
		// a*512 is exact, and q = 8 is the byte of 2^-6 itself.
		return sign | uint8(math.RoundToEven(float64(a)*512))
	}
	ab := math.Float32bits(a)
	e := int(ab>>23) - 127 + 7 // 1..8+7
	m := ab & 0x7FFFFF
	keep, rest := m>>20, m&0xFFFFF
	if rest > 0x80000 || (rest == 0x80000 && keep&1 == 1) {
		keep++
	}
	if keep == 8 {
		keep, e = 0, e+1
	}
	if e > 15 || (e == 15 && keep == 7) {
		return sign | 0x7E
	}
	return sign | uint8(e)<<3 | uint8(keep)
}

// FP8 rows: a row of n values is a little-endian float32 scale followed by n E4M3 bytes;
// element i is scale * E4M3ToF32(byte i). The scale is the row's largest magnitude over
// E4M3Max, so each output channel of a weight matrix has its own (per-channel scaling).

// fp8RowHeader is the bytes of the scale in front of an FP8 row.
const fp8RowHeader = 4

// FP8RowScale returns the scale of an FP8 row (its first four bytes).
func FP8RowScale(row []byte) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(row))
}

// dequantizeFP8 decodes one FP8 row; len(src) == 4+len(dst).
func dequantizeFP8(src []byte, dst []float32) {
	s := FP8RowScale(src)
	for i, b := range src[fp8RowHeader:] {
		dst[i] = s * e4m3Table[b]
	}
}

// quantizeFP8 encodes one row as FP8 with the scale max|x|/E4M3Max (0 for a row of zeros,
// whose bytes are then all zero).
func quantizeFP8(src []float32, dst []byte) {
	var amax float32
	for _, v := range src {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	scale := amax / E4M3Max
	binary.LittleEndian.PutUint32(dst, math.Float32bits(scale))
	q := dst[fp8RowHeader:]
	if scale == 0 {
		clear(q)
		return
	}
	for i, v := range src {
		q[i] = F32ToE4M3(v / scale)
	}
}
