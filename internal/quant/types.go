// Package quant defines the tensor element types kvasir stores weights in (the GGML type
// numbering used by GGUF files) and, for each, an exact reference dequantizer and quantizer.
//
// A quantized type packs BlockSize() consecutive elements of a row into BlockBytes() bytes.
// Rows are always a whole number of blocks.
package quant

import (
	"fmt"
	"strings"
)

// Type is a tensor element type, numbered as GGML numbers them in GGUF files.
type Type uint32

// The GGML type ids. Ids 4 and 5 (Q4_2, Q4_3) were removed from the format long ago.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

// FP8 is kvasir's own type for FP8 weights, outside GGML's numbering and never in a GGUF
// file: each row is a float32 scale and then one E4M3 byte per element (e4m3.go), made at
// load by --quantization fp8 or read from an FP8 safetensors checkpoint.
const FP8 Type = 1 << 16

// QK is the block size of the legacy quantized types (Q4_0 ... Q8_1).
const QK = 32

// QKK is the super-block size of the k-quant types (Q2_K ... Q8_K).
const QKK = 256

type typeInfo struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
}

var types = map[Type]typeInfo{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", QK, 2 + QK/2},
	Q4_1:    {"Q4_1", QK, 4 + QK/2},
	Q5_0:    {"Q5_0", QK, 2 + 4 + QK/2},
	Q5_1:    {"Q5_1", QK, 4 + 4 + QK/2},
	Q8_0:    {"Q8_0", QK, 2 + QK},
	Q8_1:    {"Q8_1", QK, 4 + QK},
	Q2_K:    {"Q2_K", QKK, QKK/16 + QKK/4 + 2 + 2},
	Q3_K:    {"Q3_K", QKK, QKK/8 + QKK/4 + 12 + 2},
	Q4_K:    {"Q4_K", QKK, 2 + 2 + 12 + QKK/2},
	Q5_K:    {"Q5_K", QKK, 2 + 2 + 12 + QKK/8 + QKK/2},
	Q6_K:    {"Q6_K", QKK, QKK/2 + QKK/4 + QKK/16 + 2},
	Q8_K:    {"Q8_K", QKK, 4 + QKK + QKK/16*2},
	IQ2_XXS: {"IQ2_XXS", QKK, 2 + QKK/8*2},
	IQ2_XS:  {"IQ2_XS", QKK, 2 + QKK/8*2 + QKK/32},
	IQ3_XXS: {"IQ3_XXS", QKK, 2 + QKK/4 + QKK/8},
	IQ1_S:   {"IQ1_S", QKK, 2 + QKK/8 + QKK/16},
	IQ4_NL:  {"IQ4_NL", QK, 2 + QK/2},
	IQ3_S:   {"IQ3_S", QKK, 2 + QKK/4 + QKK/8 + QKK/32 + 4},
	IQ2_S:   {"IQ2_S", QKK, 2 + QKK/4 + QKK/16},
	IQ4_XS:  {"IQ4_XS", QKK, 2 + 2 + QKK/64 + QKK/2},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", QKK, QKK/8 + QKK/16 + QKK/32},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", QKK, 2 + 4*13},
	TQ2_0:   {"TQ2_0", QKK, 2 + 64},
	MXFP4:   {"MXFP4", QK, 1 + QK/2},
	FP8:     {"FP8", 1, 1},
}

// rowHeaders holds the bytes in front of every row of the types that have them (FP8's
// scale); GGML's rows are blocks alone.
var rowHeaders = map[Type]int{FP8: fp8RowHeader}

// Known reports whether t is a type id this package knows the layout of.
func (t Type) Known() bool {
	_, ok := types[t]
	return ok
}

// String returns the GGML name of the type, such as "Q4_K".
func (t Type) String() string {
	if info, ok := types[t]; ok {
		return info.name
	}
	if name, ok := kvTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize returns the number of elements in one block (1 for plain types), or 0 for an
// unknown type.
func (t Type) BlockSize() int { return types[t].blockSize }

// BlockBytes returns the number of bytes one block occupies, or 0 for an unknown type.
func (t Type) BlockBytes() int { return types[t].blockBytes }

// RowBytes returns the size in bytes of n consecutive elements of type t. It fails when the
// type is unknown or n is not a whole number of blocks.
func (t Type) RowBytes(n int) (int, error) {
	info, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	if n < 0 || n%info.blockSize != 0 {
		return 0, fmt.Errorf("%s: %d elements is not a multiple of the block size %d", info.name, n, info.blockSize)
	}
	return n/info.blockSize*info.blockBytes + rowHeaders[t], nil
}

// GGML reports whether t is one of GGML's types (one a GGUF file may hold), not one of
// kvasir's own (FP8).
func (t Type) GGML() bool { return t.Known() && t != FP8 }

// RowHeader returns the bytes in front of every row of type t (FP8's scale; 0 for GGML's
// types, whose rows are blocks alone).
func (t Type) RowHeader() int { return rowHeaders[t] }

// ParseType returns the type with the given GGML name (case-insensitive), such as "q8_0".
// kvasir's own FP8 is not one of them: it is asked for with --quantization fp8.
func ParseType(name string) (Type, error) {
	for t, info := range types {
		if t.GGML() && strings.EqualFold(info.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", name)
}
