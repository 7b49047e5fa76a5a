package quant

import (
	"encoding/binary"
	"math"
)

// E4M3 helpers of the FP8 weight type: the format itself is E4M3 in fp8format.go (PyTorch's
// float8_e4m3fn: no infinities, NaN only as S.1111.111, largest finite magnitude E4M3Max).

// E4M3Max is the largest finite E4M3 magnitude, 1.75 * 2^8.
const E4M3Max = 448

// E4M3Table returns the value of every E4M3 byte, indexed by the byte (a lookup table for
// dequantizing kernels).
func E4M3Table() *[256]float32 { return E4M3.Table() }

// E4M3ToF32 returns the value of the E4M3 byte b (exactly; NaN for the NaN bytes).
func E4M3ToF32(b uint8) float32 { return E4M3.Decode(b) }

// F32ToE4M3 rounds x to the nearest E4M3 value, ties to even, saturating: magnitudes above
// E4M3Max (infinities too) become ±E4M3Max, as vLLM's and PyTorch's saturating casts do.
// NaN becomes an E4M3 NaN of its sign.
func F32ToE4M3(x float32) uint8 { return E4M3.Encode(x) }

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
		dst[i] = s * E4M3.table[b]
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
