package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// checkValue verifies that a value can be written: its Go data matches its Type, array
// elements match the element type, and arrays nest at most MaxArrayDepth deep. depth counts
// the arrays v is nested in.
func checkValue(v Value, depth int) error {
	if !v.Type.Valid() {
		return fmt.Errorf("invalid value type %d", uint32(v.Type))
	}
	if v.Type != ArrayType {
		if !holdsScalar(v) {
			return fmt.Errorf("%s value holds %T", v.Type, v.v)
		}
		return nil
	}
	if depth+1 > MaxArrayDepth {
		return fmt.Errorf("arrays nested more than %d deep", MaxArrayDepth)
	}
	if !v.elem.Valid() {
		return fmt.Errorf("array of invalid element type %d", uint32(v.elem))
	}
	elems, nested := v.v.([]Value)
	if !nested {
		if t, ok := arrayElemOf(v.v); !ok || t != v.elem {
			return fmt.Errorf("array of %s holds %T", v.elem, v.v)
		}
		return nil
	}
	for i, e := range elems {
		if e.Type != v.elem {
			return fmt.Errorf("array of %s: element %d has type %s", v.elem, i, e.Type)
		}
		if err := checkValue(e, depth+1); err != nil {
			return fmt.Errorf("array element %d: %w", i, err)
		}
	}
	return nil
}

func appendU32(b []byte, x uint32) []byte { return binary.LittleEndian.AppendUint32(b, x) }
func appendU64(b []byte, x uint64) []byte { return binary.LittleEndian.AppendUint64(b, x) }

func appendString(b []byte, s string) []byte {
	b = appendU64(b, uint64(len(s)))
	return append(b, s...)
}

// appendValue appends the encoding of a value (without its type) that checkValue accepted.
func appendValue(b []byte, v Value) []byte {
	switch x := v.v.(type) {
	case uint8:
		return append(b, x)
	case int8:
		return append(b, byte(x))
	case uint16:
		return binary.LittleEndian.AppendUint16(b, x)
	case int16:
		return binary.LittleEndian.AppendUint16(b, uint16(x))
	case uint32:
		return appendU32(b, x)
	case int32:
		return appendU32(b, uint32(x))
	case float32:
		return appendU32(b, math.Float32bits(x))
	case bool:
		if x {
			return append(b, 1)
		}
		return append(b, 0)
	case string:
		return appendString(b, x)
	case uint64:
		return appendU64(b, x)
	case int64:
		return appendU64(b, uint64(x))
	case float64:
		return appendU64(b, math.Float64bits(x))
	}
	// An array: element type, count, elements.
	b = appendU32(b, uint32(v.elem))
	n := v.Len()
	b = appendU64(b, uint64(n))
	switch s := v.v.(type) {
	case []uint8:
		return append(b, s...)
	case []string:
		for _, e := range s {
			b = appendString(b, e)
		}
		return b
	case []float32:
		for _, e := range s {
			b = appendU32(b, math.Float32bits(e))
		}
		return b
	case []int32:
		for _, e := range s {
			b = appendU32(b, uint32(e))
		}
		return b
	case []Value:
		for _, e := range s {
			b = appendValue(b, e)
		}
		return b
	}
	for i := range n {
		e, _ := v.Index(i)
		b = appendValue(b, e)
	}
	return b
}
