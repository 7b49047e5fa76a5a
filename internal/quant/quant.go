package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Supported reports whether Dequantize and Quantize handle type t: F32, F16, BF16, the legacy
// block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, the k-quants Q2_K ... Q8_K and FP8 (whose
// src and dst are one row: its scale is per row).
func Supported(t Type) bool {
	switch t {
	case F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, FP8:
		return true
	}
	return false
}

// checkSizes validates that n elements of type t occupy exactly nbytes bytes.
func checkSizes(op string, t Type, n, nbytes int) error {
	if !t.Known() {
		return fmt.Errorf("quant: %s: unknown tensor type %d", op, uint32(t))
	}
	if !Supported(t) {
		return fmt.Errorf("quant: %s %s: type not supported", op, t)
	}
	want, err := t.RowBytes(n)
	if err != nil {
		return fmt.Errorf("quant: %s: %w", op, err)
	}
	if nbytes != want {
		return fmt.Errorf("quant: %s %s: %d elements take %d bytes, got %d bytes", op, t, n, want, nbytes)
	}
	return nil
}

// Dequantize decodes len(dst) elements (a whole number of blocks) of type t from src into
// dst. src must be exactly t.RowBytes(len(dst)) bytes long. The results are bit-exact with
// GGML's reference dequantizers. Arbitrary bytes never make it panic (they may decode to
// infinities or NaNs).
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := checkSizes("dequantize", t, len(dst), len(src)); err != nil {
		return err
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q4_0:
		for i := range len(dst) / 32 {
			DequantizeBlockQ4_0((*[18]byte)(src[18*i:]), (*[32]float32)(dst[32*i:]))
		}
	case Q4_1:
		for i := range len(dst) / 32 {
			DequantizeBlockQ4_1((*[20]byte)(src[20*i:]), (*[32]float32)(dst[32*i:]))
		}
	case Q5_0:
		for i := range len(dst) / 32 {
			DequantizeBlockQ5_0((*[22]byte)(src[22*i:]), (*[32]float32)(dst[32*i:]))
		}
	case Q5_1:
		for i := range len(dst) / 32 {
			DequantizeBlockQ5_1((*[24]byte)(src[24*i:]), (*[32]float32)(dst[32*i:]))
		}
	case Q8_0:
		for i := range len(dst) / 32 {
			DequantizeBlockQ8_0((*[34]byte)(src[34*i:]), (*[32]float32)(dst[32*i:]))
		}
	case Q8_1:
		for i := range len(dst) / 32 {
			DequantizeBlockQ8_1((*[36]byte)(src[36*i:]), (*[32]float32)(dst[32*i:]))
		}
	case Q2_K:
		for i := range len(dst) / 256 {
			DequantizeBlockQ2_K((*[84]byte)(src[84*i:]), (*[256]float32)(dst[256*i:]))
		}
	case Q3_K:
		for i := range len(dst) / 256 {
			DequantizeBlockQ3_K((*[110]byte)(src[110*i:]), (*[256]float32)(dst[256*i:]))
		}
	case Q4_K:
		for i := range len(dst) / 256 {
			DequantizeBlockQ4_K((*[144]byte)(src[144*i:]), (*[256]float32)(dst[256*i:]))
		}
	case Q5_K:
		for i := range len(dst) / 256 {
			DequantizeBlockQ5_K((*[176]byte)(src[176*i:]), (*[256]float32)(dst[256*i:]))
		}
	case Q6_K:
		for i := range len(dst) / 256 {
			DequantizeBlockQ6_K((*[210]byte)(src[210*i:]), (*[256]float32)(dst[256*i:]))
		}
	case Q8_K:
		for i := range len(dst) / 256 {
			DequantizeBlockQ8_K((*[292]byte)(src[292*i:]), (*[256]float32)(dst[256*i:]))
		}
	case FP8:
		dequantizeFP8(src, dst)
	}
	return nil
}

// Quantize encodes src (a whole number of blocks) as type t into dst, which must be exactly
// t.RowBytes(len(src)) bytes long. Legacy types use GGML's round-to-nearest reference
// algorithms; k-quants search their block scales as GGML's reference quantizers do.
func Quantize(t Type, src []float32, dst []byte) error {
	if err := checkSizes("quantize", t, len(src), len(dst)); err != nil {
		return err
	}
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	case Q4_0:
		for i := range len(src) / 32 {
			quantizeBlockQ4_0((*[32]float32)(src[32*i:]), (*[18]byte)(dst[18*i:]))
		}
	case Q4_1:
		for i := range len(src) / 32 {
			quantizeBlockQ4_1((*[32]float32)(src[32*i:]), (*[20]byte)(dst[20*i:]))
		}
	case Q5_0:
		for i := range len(src) / 32 {
			quantizeBlockQ5_0((*[32]float32)(src[32*i:]), (*[22]byte)(dst[22*i:]))
		}
	case Q5_1:
		for i := range len(src) / 32 {
			quantizeBlockQ5_1((*[32]float32)(src[32*i:]), (*[24]byte)(dst[24*i:]))
		}
	case Q8_0:
		for i := range len(src) / 32 {
			QuantizeBlockQ8_0((*[32]float32)(src[32*i:]), (*[34]byte)(dst[34*i:]))
		}
	case Q8_1:
		for i := range len(src) / 32 {
			QuantizeBlockQ8_1((*[32]float32)(src[32*i:]), (*[36]byte)(dst[36*i:]))
		}
	case Q2_K:
		for i := range len(src) / 256 {
			quantizeBlockQ2_K((*[256]float32)(src[256*i:]), (*[84]byte)(dst[84*i:]))
		}
	case Q3_K:
		for i := range len(src) / 256 {
			quantizeBlockQ3_K((*[256]float32)(src[256*i:]), (*[110]byte)(dst[110*i:]))
		}
	case Q4_K:
		for i := range len(src) / 256 {
			quantizeBlockQ4_K((*[256]float32)(src[256*i:]), (*[144]byte)(dst[144*i:]))
		}
	case Q5_K:
		for i := range len(src) / 256 {
			quantizeBlockQ5_K((*[256]float32)(src[256*i:]), (*[176]byte)(dst[176*i:]))
		}
	case Q6_K:
		for i := range len(src) / 256 {
			quantizeBlockQ6_K((*[256]float32)(src[256*i:]), (*[210]byte)(dst[210*i:]))
		}
	case Q8_K:
		for i := range len(src) / 256 {
			QuantizeBlockQ8_K((*[256]float32)(src[256*i:]), (*[292]byte)(dst[292*i:]))
		}
	case FP8:
		quantizeFP8(src, dst)
	}
	return nil
}

// getF16 reads a little-endian half at the start of b as float32.
func getF16(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// putF16 writes v as a little-endian half at the start of b.
func putF16(b []byte, v float32) { binary.LittleEndian.PutUint16(b, F32ToF16(v)) }

// nearestInt rounds to the nearest integer, ties to even, as GGML's nearest_int does for the
// magnitudes quantizers see. NaN maps to 0 so that callers' clamps stay meaningful.
func nearestInt(x float32) int {
	if x != x {
		return 0
	}
	r := math.RoundToEven(float64(x))
	if r > 1<<30 {
		return 1 << 30
	}
	if r < -(1 << 30) {
		return -(1 << 30)
	}
	return int(r)
}

// roundAway rounds to the nearest integer, ties away from zero, like C's roundf. NaN maps to 0.
func roundAway(x float32) int {
	if x != x {
		return 0
	}
	r := math.Round(float64(x))
	if r > 1<<30 {
		return 1 << 30
	}
	if r < -(1 << 30) {
		return -(1 << 30)
	}
	return int(r)
}

// truncInt converts like a C cast from float to int (toward zero), saturating instead of
// being undefined out of range. NaN maps to 0.
func truncInt(x float32) int {
	if x != x {
		return 0
	}
	if x > 1<<30 {
		return 1 << 30
	}
	if x < -(1 << 30) {
		return -(1 << 30)
	}
	return int(x)
}

// clampInt limits v to [lo, hi].
func clampInt(v, lo, hi int) int {
	return max(lo, min(hi, v))
}

// absMax returns the element of x with the largest magnitude (the first one on ties) and that
// magnitude.
func absMax(x []float32) (signed, amax float32) {
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, signed = a, v
		}
	}
	return signed, amax
}
