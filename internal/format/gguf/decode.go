package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MaxArrayDepth is how deeply arrays may nest (an array of scalars has depth 1). Deeper
// nesting is refused when reading and writing.
const MaxArrayDepth = 16

// maxPrealloc caps how many elements a slice is given up front from a count read in a
// file; longer slices grow as their elements are actually read.
const maxPrealloc = 1 << 16

// decoder reads little-endian GGUF fields from a byte slice, checking every length against
// the bytes that remain.
type decoder struct {
	data []byte
	off  int
}

func (d *decoder) left() int { return len(d.data) - d.off }

// take returns the next n bytes, or an error naming what was being read.
func (d *decoder) take(n int, what string) ([]byte, error) {
	if n < 0 || n > d.left() {
		return nil, fmt.Errorf("%s: truncated at offset %d (need %d bytes, %d left)", what, d.off, n, d.left())
	}
	b := d.data[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	b, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	b, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a string: a uint64 byte count and the bytes, copied out of the input.
func (d *decoder) str(what string) (string, error) {
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(d.left()) {
		return "", fmt.Errorf("%s: length %d at offset %d is more than the %d bytes left", what, n, d.off-8, d.left())
	}
	b, _ := d.take(int(n), what)
	return string(b), nil
}

// count reads an element count and checks that count elements of at least minSize bytes
// each fit in what remains of the input.
func (d *decoder) count(what string, minSize int) (int, error) {
	n, err := d.u64(what)
	if err != nil {
		return 0, err
	}
	if n > uint64(d.left()/minSize) {
		return 0, fmt.Errorf("%s %d at offset %d cannot fit in the %d bytes left", what, n, d.off-8, d.left())
	}
	return int(n), nil
}

// valueType reads a value type and checks it is one of the thirteen.
func (d *decoder) valueType(what string) (ValueType, error) {
	t, err := d.u32(what)
	if err != nil {
		return 0, err
	}
	if !ValueType(t).Valid() {
		return 0, fmt.Errorf("%s: invalid value type %d at offset %d", what, t, d.off-4)
	}
	return ValueType(t), nil
}

// value reads one value of type t; depth counts the arrays it is nested in.
func (d *decoder) value(t ValueType, depth int) (Value, error) {
	if t == ArrayType {
		return d.array(depth + 1)
	}
	if t == StringType {
		s, err := d.str("string")
		return String(s), err
	}
	b, err := d.take(t.size(), t.String())
	if err != nil {
		return Value{}, err
	}
	return scalarFrom(t, b), nil
}

// scalarFrom decodes a fixed-size scalar from exactly t.size() bytes.
func scalarFrom(t ValueType, b []byte) Value {
	le := binary.LittleEndian
	switch t {
	case Uint8Type:
		return Uint8(b[0])
	case Int8Type:
		return Int8(int8(b[0]))
	case Uint16Type:
		return Uint16(le.Uint16(b))
	case Int16Type:
		return Int16(int16(le.Uint16(b)))
	case Uint32Type:
		return Uint32(le.Uint32(b))
	case Int32Type:
		return Int32(int32(le.Uint32(b)))
	case Float32Type:
		return Float32(math.Float32frombits(le.Uint32(b)))
	case BoolType:
		return Bool(b[0] != 0)
	case Uint64Type:
		return Uint64(le.Uint64(b))
	case Int64Type:
		return Int64(int64(le.Uint64(b)))
	case Float64Type:
		return Float64(math.Float64frombits(le.Uint64(b)))
	}
	return Value{}
}

// minEncodedSize is the fewest bytes one array element of type t can take.
func minEncodedSize(t ValueType) int {
	switch t {
	case StringType:
		return 8 // the length
	case ArrayType:
		return 4 + 8 // element type and count
	}
	return t.size()
}

// array reads an array (element type, count, elements) at nesting depth depth.
func (d *decoder) array(depth int) (Value, error) {
	if depth > MaxArrayDepth {
		return Value{}, fmt.Errorf("arrays nested more than %d deep at offset %d", MaxArrayDepth, d.off)
	}
	elem, err := d.valueType("array element type")
	if err != nil {
		return Value{}, err
	}
	n, err := d.count("array count", minEncodedSize(elem))
	if err != nil {
		return Value{}, err
	}
	if size := elem.size(); size > 0 {
		// n*size fits: count checked it against the bytes left.
		b, _ := d.take(n*size, "array")
		return fixedArray(elem, n, b), nil
	}
	if elem == StringType {
		out := make([]string, 0, min(n, maxPrealloc))
		for i := range n {
			s, err := d.str("string")
			if err != nil {
				return Value{}, fmt.Errorf("array element %d: %w", i, err)
			}
			out = append(out, s)
		}
		return Strings(out), nil
	}
	out := make([]Value, 0, min(n, maxPrealloc))
	for i := range n {
		v, err := d.array(depth + 1)
		if err != nil {
			return Value{}, fmt.Errorf("array element %d: %w", i, err)
		}
		out = append(out, v)
	}
	return Array(ArrayType, out...), nil
}

// fixedArray decodes n fixed-size elements of type t from b.
func fixedArray(t ValueType, n int, b []byte) Value {
	le := binary.LittleEndian
	switch t {
	case Uint8Type:
		return Uint8s(decodeEach(n, func(i int) uint8 { return b[i] }))
	case Int8Type:
		return Int8s(decodeEach(n, func(i int) int8 { return int8(b[i]) }))
	case Uint16Type:
		return Uint16s(decodeEach(n, func(i int) uint16 { return le.Uint16(b[2*i:]) }))
	case Int16Type:
		return Int16s(decodeEach(n, func(i int) int16 { return int16(le.Uint16(b[2*i:])) }))
	case Uint32Type:
		return Uint32s(decodeEach(n, func(i int) uint32 { return le.Uint32(b[4*i:]) }))
	case Int32Type:
		return Int32s(decodeEach(n, func(i int) int32 { return int32(le.Uint32(b[4*i:])) }))
	case Float32Type:
		return Float32s(decodeEach(n, func(i int) float32 { return math.Float32frombits(le.Uint32(b[4*i:])) }))
	case BoolType:
		return Bools(decodeEach(n, func(i int) bool { return b[i] != 0 }))
	case Uint64Type:
		return Uint64s(decodeEach(n, func(i int) uint64 { return le.Uint64(b[8*i:]) }))
	case Int64Type:
		return Int64s(decodeEach(n, func(i int) int64 { return int64(le.Uint64(b[8*i:])) }))
	case Float64Type:
		return Float64s(decodeEach(n, func(i int) float64 { return math.Float64frombits(le.Uint64(b[8*i:])) }))
	}
	return Value{}
}

func decodeEach[T any](n int, at func(i int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = at(i)
	}
	return out
}
