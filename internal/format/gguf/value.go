package gguf

import (
	"fmt"
	"math"
	"slices"
)

// ValueType is the type of a metadata value, numbered as in GGUF files.
type ValueType uint32

// The GGUF metadata value types.
const (
	Uint8Type   ValueType = 0
	Int8Type    ValueType = 1
	Uint16Type  ValueType = 2
	Int16Type   ValueType = 3
	Uint32Type  ValueType = 4
	Int32Type   ValueType = 5
	Float32Type ValueType = 6
	BoolType    ValueType = 7
	StringType  ValueType = 8
	ArrayType   ValueType = 9
	Uint64Type  ValueType = 10
	Int64Type   ValueType = 11
	Float64Type ValueType = 12
)

var valueTypeNames = [...]string{
	"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
	"BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
}

// Valid reports whether t is one of the thirteen GGUF value types.
func (t ValueType) Valid() bool { return int(t) < len(valueTypeNames) }

// String returns the GGUF name of the type, such as "UINT32".
func (t ValueType) String() string {
	if t.Valid() {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// size returns the encoded size of one scalar of type t, or 0 for strings, arrays and
// invalid types, whose size is not fixed.
func (t ValueType) size() int {
	switch t {
	case Uint8Type, Int8Type, BoolType:
		return 1
	case Uint16Type, Int16Type:
		return 2
	case Uint32Type, Int32Type, Float32Type:
		return 4
	case Uint64Type, Int64Type, Float64Type:
		return 8
	}
	return 0
}

// Value is one metadata value of any GGUF type, arrays (and arrays of arrays) included.
// Build values with the constructors (String, Uint32, Strings, Array, ...) or get them from
// a parsed File; the zero Value holds nothing and every accessor reports false for it.
//
// A Value holds its data as the natural Go type: a scalar as uint8 ... float64, bool or
// string; an array of scalars as a typed slice ([]string, []float32, ...); an array of
// arrays as []Value. Slices are shared, not copied: do not modify them.
type Value struct {
	// Type is the value's GGUF type.
	Type ValueType
	elem ValueType // element type when Type is ArrayType
	v    any
}

// ElemType returns the element type of an array value (and false for any other value).
func (v Value) ElemType() (ValueType, bool) {
	if v.Type != ArrayType || v.v == nil {
		return 0, false
	}
	return v.elem, true
}

// Len returns the number of elements of an array value, and 0 for any other value.
func (v Value) Len() int {
	if v.Type != ArrayType {
		return 0
	}
	switch s := v.v.(type) {
	case []uint8:
		return len(s)
	case []int8:
		return len(s)
	case []uint16:
		return len(s)
	case []int16:
		return len(s)
	case []uint32:
		return len(s)
	case []int32:
		return len(s)
	case []float32:
		return len(s)
	case []bool:
		return len(s)
	case []string:
		return len(s)
	case []uint64:
		return len(s)
	case []int64:
		return len(s)
	case []float64:
		return len(s)
	case []Value:
		return len(s)
	}
	return 0
}

// Index returns element i of an array value; ok is false when v is not an array or i is out
// of range.
func (v Value) Index(i int) (Value, bool) {
	if v.Type != ArrayType || i < 0 || i >= v.Len() {
		return Value{}, false
	}
	switch s := v.v.(type) {
	case []uint8:
		return Uint8(s[i]), true
	case []int8:
		return Int8(s[i]), true
	case []uint16:
		return Uint16(s[i]), true
	case []int16:
		return Int16(s[i]), true
	case []uint32:
		return Uint32(s[i]), true
	case []int32:
		return Int32(s[i]), true
	case []float32:
		return Float32(s[i]), true
	case []bool:
		return Bool(s[i]), true
	case []string:
		return String(s[i]), true
	case []uint64:
		return Uint64(s[i]), true
	case []int64:
		return Int64(s[i]), true
	case []float64:
		return Float64(s[i]), true
	case []Value:
		return s[i], true
	}
	return Value{}, false
}

// String returns the value of a STRING value.
func (v Value) String() (string, bool) {
	s, ok := v.v.(string)
	return s, ok && v.Type == StringType
}

// Uint64 returns the value of any integer value (UINT8 ... INT64) that is not negative.
func (v Value) Uint64() (uint64, bool) {
	if v.Type == ArrayType {
		return 0, false
	}
	return toUint64(v.v)
}

// Int64 returns the value of any integer value (UINT8 ... INT64) that fits an int64.
func (v Value) Int64() (int64, bool) {
	if v.Type == ArrayType {
		return 0, false
	}
	return toInt64(v.v)
}

// Float64 returns the value of any numeric value, integer or floating point.
func (v Value) Float64() (float64, bool) {
	if v.Type == ArrayType {
		return 0, false
	}
	return toFloat64(v.v)
}

// Bool returns the value of a BOOL value.
func (v Value) Bool() (bool, bool) {
	b, ok := v.v.(bool)
	return b, ok && v.Type == BoolType
}

// Strings returns the elements of an array of strings (shared, not copied).
func (v Value) Strings() ([]string, bool) {
	s, ok := v.v.([]string)
	return s, ok && v.Type == ArrayType
}

// Float32s returns the elements of a numeric array as float32s. An array of FLOAT32 is
// returned as it is held (shared, not copied); other numeric arrays are converted.
func (v Value) Float32s() ([]float32, bool) {
	if v.Type != ArrayType {
		return nil, false
	}
	if s, ok := v.v.([]float32); ok {
		return s, true
	}
	return convertArray(v, func(x any) (float32, bool) {
		f, ok := toFloat64(x)
		return float32(f), ok
	})
}

// Int32s returns the elements of an integer array as int32s. An array of INT32 is returned
// as it is held (shared, not copied); other integer arrays are converted, and the call fails
// when an element does not fit an int32.
func (v Value) Int32s() ([]int32, bool) {
	if v.Type != ArrayType {
		return nil, false
	}
	if s, ok := v.v.([]int32); ok {
		return s, true
	}
	return convertArray(v, func(x any) (int32, bool) {
		n, ok := toInt64(x)
		if !ok || n < math.MinInt32 || n > math.MaxInt32 {
			return 0, false
		}
		return int32(n), true
	})
}

// Array returns the elements of any array value as Values.
func (v Value) Array() ([]Value, bool) {
	if v.Type != ArrayType || v.v == nil {
		return nil, false
	}
	if s, ok := v.v.([]Value); ok {
		return s, true
	}
	n := v.Len()
	out := make([]Value, n)
	for i := range n {
		out[i], _ = v.Index(i)
	}
	return out, true
}

// Any returns the value as a plain Go value: uint8 ... float64, bool or string for a scalar,
// the typed slice ([]string, []float32, ...) for an array of scalars, and []any (each element
// converted the same way) for an array of arrays.
func (v Value) Any() any {
	if s, ok := v.v.([]Value); ok {
		out := make([]any, len(s))
		for i, e := range s {
			out[i] = e.Any()
		}
		return out
	}
	return v.v
}

// Equal reports whether v and o have the same type and the same contents. Floating-point
// values are compared bit for bit, so a NaN equals the same NaN.
func (v Value) Equal(o Value) bool {
	if v.Type != o.Type {
		return false
	}
	if v.Type != ArrayType {
		return scalarEqual(v.v, o.v)
	}
	if v.elem != o.elem || v.Len() != o.Len() {
		return false
	}
	switch a := v.v.(type) {
	case []uint8:
		return eqSlice(a, o.v)
	case []int8:
		return eqSlice(a, o.v)
	case []uint16:
		return eqSlice(a, o.v)
	case []int16:
		return eqSlice(a, o.v)
	case []uint32:
		return eqSlice(a, o.v)
	case []int32:
		return eqSlice(a, o.v)
	case []bool:
		return eqSlice(a, o.v)
	case []string:
		return eqSlice(a, o.v)
	case []uint64:
		return eqSlice(a, o.v)
	case []int64:
		return eqSlice(a, o.v)
	}
	for i := range v.Len() {
		x, _ := v.Index(i)
		y, _ := o.Index(i)
		if !x.Equal(y) {
			return false
		}
	}
	return true
}

func eqSlice[T comparable](a []T, other any) bool {
	b, ok := other.([]T)
	return ok && slices.Equal(a, b)
}

func scalarEqual(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case nil:
		return b == nil
	}
	return a == b
}

// convertArray converts every element of an array with conv, failing if any fails.
func convertArray[T any](v Value, conv func(any) (T, bool)) ([]T, bool) {
	if _, nested := v.v.([]Value); nested || v.v == nil {
		return nil, false
	}
	n := v.Len()
	out := make([]T, n)
	for i := range n {
		e, _ := v.Index(i)
		x, ok := conv(e.v)
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

func toUint64(x any) (uint64, bool) {
	switch n := x.(type) {
	case uint8:
		return uint64(n), true
	case uint16:
		return uint64(n), true
	case uint32:
		return uint64(n), true
	case uint64:
		return n, true
	}
	if n, ok := toInt64(x); ok && n >= 0 {
		return uint64(n), true
	}
	return 0, false
}

func toInt64(x any) (int64, bool) {
	switch n := x.(type) {
	case uint8:
		return int64(n), true
	case int8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int32:
		return int64(n), true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

func toFloat64(x any) (float64, bool) {
	switch n := x.(type) {
	case float32:
		return float64(n), true
	case float64:
		return n, true
	case uint64:
		return float64(n), true
	}
	if n, ok := toInt64(x); ok {
		return float64(n), true
	}
	return 0, false
}
