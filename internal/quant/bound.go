package quant

import (
	"fmt"
	"math"
)

// blockBound returns the error bound of one block of type t.
func blockBound(t Type, x []float32) float64 {
	var amax, lo, hi float64
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range x {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return math.Inf(1)
		}
		amax = math.Max(amax, math.Abs(f))
		lo = math.Min(lo, f)
		hi = math.Max(hi, f)
	}
	const f16Max = 65504
	const sub = 1.0 / (1 << 24) // f16 subnormal spacing
	switch t {
	case F32:
		return 0
	case F16:
		if amax > f16Max {
			return math.Inf(1)
		}
		return amax*0x1p-11 + 0x1p-25
	case BF16:
		if amax > 0x1.fep127 { // largest finite bf16: beyond it values may round to infinity
			return math.Inf(1)
		}
		return amax*0x1p-8 + 0x1p-133
	case Q8_K:
		return amax/254 + amax*0x1p-20 + 0x1p-120 // below ~2^-120 the f32 scale degrades
	}
	if amax > f16Max {
		return math.Inf(1)
	}
	switch t {
	case Q8_0, Q8_1:
		return amax/254 + amax*0x1p-10 + 128*sub
	case Q4_0:
		return amax/8 + amax*0x1p-10 + 16*sub
	case Q5_0:
		return amax/16 + amax*0x1p-10 + 32*sub
	case Q4_1:
		return (hi-lo)/30 + amax*0x1p-9 + 16*sub
	case Q5_1:
		return (hi-lo)/62 + amax*0x1p-9 + 32*sub
	case Q2_K:
		return 2.4*amax/3 + 64*3*sub
	case Q3_K:
		return 2.8*amax/7 + 64*7*sub
	case Q4_K:
		return 2.25*amax/15 + 64*15*sub
	case Q5_K:
		return 2.8*amax/31 + 64*31*sub
	case Q6_K:
		return 2.5*amax/63 + 64*63*sub
	}
	return math.Inf(1)
}

// ErrorBound returns the largest absolute error that a round trip
// Dequantize(t, Quantize(t, src)) may show on any element of src. src must be a whole number
// of blocks; for several blocks the result is the largest of their bounds (tests compare
// block by block for the tightest check).
//
// For a block with largest magnitude A and range R = max - min, the bounds are:
//
//	F32                  0
//	F16                  A*2^-11 + 2^-25            (half an ulp, subnormals included)
//	BF16                 A*2^-8  + 2^-133
//	Q8_0, Q8_1           A/254   + A*2^-10 + c      (half a step of A/127, f16 scale rounding)
//	Q4_0                 A/8     + A*2^-10 + c      (a full step: +A clamps to level 7 of -8..7)
//	Q5_0                 A/16    + A*2^-10 + c
//	Q4_1                 R/30    + A*2^-9  + c      (half a step of R/15, f16 scale and min)
//	Q5_1                 R/62    + A*2^-9  + c
//	Q8_K                 A/254   + A*2^-20 + 2^-120 (f32 scale; tiny blocks underflow)
//	Q2_K, Q3_K, Q4_K,    k*A/L   + c                (L = 3, 7, 15, 31, 63 levels;
//	Q5_K, Q6_K                                       k = 2.4, 2.8, 2.25, 2.8, 2.5)
//
// The legacy and Q8_K bounds follow from the algorithms. The k-quant bounds are design bounds
// for this package's quantizers, about 1.2-2x the worst error seen over 10^5 blocks per type of
// gaussian, uniform, sparse, bimodal, heavy-tailed and outlier data: the scale search fits
// each sub-block in the least-squares sense and may clip an extreme element, and sub-block
// scales are themselves quantized against the block's largest one. c is an absolute term for
// f16 scales that underflow into subnormals on tiny blocks (levels*2^-24, times 64 for the
// 6-bit k-quant sub-scales). A block holding NaN, an infinity, or a magnitude beyond the f16
// range (for f16-scaled types; the bf16 range for BF16) has an infinite bound.
func ErrorBound(t Type, src []float32) (float64, error) {
	if !Supported(t) {
		return 0, fmt.Errorf("quant: error bound %s: type not supported", t)
	}
	bs := t.BlockSize()
	if len(src)%bs != 0 {
		return 0, fmt.Errorf("quant: error bound %s: %d elements is not a multiple of the block size %d", t, len(src), bs)
	}
	var worst float64
	for i := 0; i < len(src); i += bs {
		worst = math.Max(worst, blockBound(t, src[i:i+bs]))
	}
	return worst, nil
}

// MaxError quantizes src (a whole number of blocks) to type t, dequantizes it back and returns
// the largest absolute difference from src. It is NaN when a round trip produced NaN.
func MaxError(t Type, src []float32) (float64, error) {
	n, err := t.RowBytes(len(src))
	if err != nil {
		return 0, fmt.Errorf("quant: max error: %w", err)
	}
	q := make([]byte, n)
	if err := Quantize(t, src, q); err != nil {
		return 0, err
	}
	y := make([]float32, len(src))
	if err := Dequantize(t, q, y); err != nil {
		return 0, err
	}
	var worst float64
	for i, v := range src {
		e := math.Abs(float64(v) - float64(y[i]))
		if math.IsNaN(e) {
			return math.NaN(), nil
		}
		worst = math.Max(worst, e)
	}
	return worst, nil
}
