package gguf

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// MaxDims is the most dimensions a tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// MaxTensorName is the longest tensor name, in bytes, that llama.cpp accepts (it keeps names
// in a 64-byte buffer with a terminating zero). Writer refuses longer names; reading accepts
// them.
const MaxTensorName = 63

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	// Name is the tensor's name, such as "blk.0.attn_q.weight".
	Name string
	// Dims are the dimensions in file order: Dims[0] is the innermost (the row length),
	// the reverse of the PyTorch shape. In a parsed file each fits an int64.
	Dims []uint64
	// Type is the element type. A file may hold types this build does not know
	// (Type.GGML() is false): such tensors are listed, but their data cannot be taken.
	Type quant.Type
	// Offset is where the tensor's data starts, relative to the data section.
	Offset uint64
}

// Elements returns the number of elements, the product of Dims (1 for no dimensions). For
// a tensor of a parsed file the product is known to fit an int64; otherwise an overflowing
// product returns 0 and false.
func (ti *TensorInfo) Elements() (uint64, bool) {
	return elementCount(ti.Dims)
}

// Size returns the number of bytes the tensor's data occupies. It fails for a type this
// build does not know, when the row length (Dims[0]) is not a whole number of blocks, or when
// the size overflows.
func (ti *TensorInfo) Size() (uint64, error) {
	return tensorBytes(ti.Type, ti.Dims)
}

func elementCount(dims []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// tensorBytes returns the size in bytes of a tensor of type t with dimensions dims.
func tensorBytes(t quant.Type, dims []uint64) (uint64, error) {
	n, ok := elementCount(dims)
	if !ok {
		return 0, fmt.Errorf("dimensions %v: element count overflows int64", dims)
	}
	if !t.GGML() { // kvasir's own FP8 never lies in a GGUF file
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	bs := uint64(t.BlockSize())
	row := uint64(1)
	if len(dims) > 0 {
		row = dims[0]
	}
	if row%bs != 0 {
		return 0, fmt.Errorf("%s: row of %d elements is not a multiple of the block size %d", t, row, bs)
	}
	hi, size := bits.Mul64(n/bs, uint64(t.BlockBytes()))
	if hi != 0 || size > math.MaxInt64 {
		return 0, fmt.Errorf("%s %v: byte size overflows int64", t, dims)
	}
	return size, nil
}

// alignUp rounds n up to a multiple of align, a power of two; ok is false on overflow.
func alignUp(n, align uint64) (uint64, bool) {
	r := (n + align - 1) &^ (align - 1)
	return r, r >= n
}
