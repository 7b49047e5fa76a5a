// Package kvquant is the layout and the arithmetic of the quantized KV cache element types
// (quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2).
//
// A quantized cache holds, for every head vector of HeadDim elements, HeadDim one-byte
// codes and one float32 scale per group of Group(HeadDim) consecutive elements: a value
// reads as decode(code) x scale. A group's scale is max|x| / the largest code value (127
// for int8, 448 for E4M3, 57344 for E5M2), chosen when the group is written, so every
// group uses its type's whole range and nothing saturates; a group of zeros has scale 0.
// Per-group scales cost 4 bytes per 32 elements (1.125 bytes per element against f16's 2)
// and need no calibration: keys and values are quantized as they are written, token by
// token, with no knowledge of the tokens to come.
package kvquant

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// MaxGroup is the number of elements that share a scale when the head dimension is a
// multiple of it.
const MaxGroup = 32

// Group returns how many consecutive elements of a head vector of headDim elements share
// a scale: MaxGroup when headDim is a multiple of it, else the whole vector.
func Group(headDim int) int {
	if headDim%MaxGroup == 0 {
		return MaxGroup
	}
	return headDim
}

// RowBytes returns the bytes one head vector of headDim elements of type t takes in a
// cache: headDim codes and headDim/Group(headDim) float32 scales for a quantized type,
// headDim elements of 4 (F32) or 2 (F16, BF16) bytes for a plain one, and 0 for a type no
// cache holds.
func RowBytes(t quant.Type, headDim int) int {
	switch t {
	case quant.F32:
		return 4 * headDim
	case quant.F16, quant.BF16:
		return 2 * headDim
	case quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2:
		return headDim + 4*(headDim/Group(headDim))
	}
	return 0
}

// Codec quantizes and dequantizes the head vectors of one quantized type.
type Codec struct {
	Type  quant.Type
	fp8   *quant.FP8Format // nil for int8
	qmax  float32          // the largest code value
	table *[256]float32
}

// int8Table maps an int8 code's byte to its value.
var int8Table = func() *[256]float32 {
	var t [256]float32
	for c := range t {
		t[c] = float32(int8(uint8(c)))
	}
	return &t
}()

// NewCodec returns the codec of quantized type t.
func NewCodec(t quant.Type) (*Codec, error) {
	switch t {
	case quant.KVInt8:
		return &Codec{Type: t, qmax: 127, table: int8Table}, nil
	case quant.KVFP8E4M3:
		return &Codec{Type: t, fp8: quant.E4M3, qmax: quant.E4M3.Max, table: quant.E4M3.Table()}, nil
	case quant.KVFP8E5M2:
		return &Codec{Type: t, fp8: quant.E5M2, qmax: quant.E5M2.Max, table: quant.E5M2.Table()}, nil
	}
	return nil, fmt.Errorf("kvquant: %s is not a quantized kv cache type", t)
}

// FP8 returns the code format of an FP8 type (nil for int8).
func (c *Codec) FP8() *quant.FP8Format { return c.fp8 }

// Table returns the value of every code byte (before its scale).
func (c *Codec) Table() *[256]float32 { return c.table }

// Quantize writes src, whole groups of group elements, as codes (one per element) and
// scales (one per group).
func (c *Codec) Quantize(codes []byte, scales []float32, src []float32, group int) {
	codes = codes[:len(src)]
	scales = scales[:len(src)/group]
	for g := range scales {
		x := src[g*group : (g+1)*group]
		q := codes[g*group : (g+1)*group]
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		s := amax / c.qmax
		scales[g] = s
		if s == 0 || !isFinite(s) {
			clear(q)
			scales[g] = 0
			continue
		}
		for i, v := range x {
			q[i] = c.code(v / s)
		}
	}
}

// code returns the code of y = x / scale, |y| <= qmax up to rounding.
func (c *Codec) code(y float32) byte {
	if c.fp8 != nil {
		return c.fp8.Encode(y)
	}
	r := math.RoundToEven(float64(y))
	r = max(-127, min(127, r))
	return byte(int8(r))
}

// Dequantize writes the values of codes (whole groups of group elements, scales one per
// group) to dst.
func (c *Codec) Dequantize(dst []float32, codes []byte, scales []float32, group int) {
	dst = dst[:len(codes)]
	for g, s := range scales[:len(codes)/group] {
		q := codes[g*group : (g+1)*group]
		d := dst[g*group : (g+1)*group]
		for i, b := range q {
			d[i] = c.table[b] * s
		}
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

func isFinite(x float32) bool { return !math.IsInf(float64(x), 0) && !math.IsNaN(float64(x)) }
