// Package safetensors reads and writes Hugging Face safetensors files and sharded folders.
//
// A file is an 8-byte little-endian header length, a JSON header naming every tensor's
// dtype, shape and byte range, and then the tensors' bytes. Open memory-maps a file read-only
// and hands out each tensor as a slice of the mapping; nothing is copied. OpenDir opens a
// model folder (one model.safetensors, or shards listed by model.safetensors.index.json) as
// one set of tensors. Write and WriteSharded produce files Hugging Face tools accept.
package safetensors

// DType is a safetensors element type, spelled as in the header ("F32", "BF16", ...).
type DType string

// The element types safetensors defines.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
)

// Size returns the size in bytes of one element, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case I8, U8, BOOL, F8E4M3, F8E5M2:
		return 1
	}
	return 0
}

// Valid reports whether d is a type this package knows.
func (d DType) Valid() bool { return d.Size() != 0 }
