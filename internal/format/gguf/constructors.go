package gguf

// Uint8 returns a UINT8 value.
func Uint8(x uint8) Value { return Value{Type: Uint8Type, v: x} }

// Int8 returns an INT8 value.
func Int8(x int8) Value { return Value{Type: Int8Type, v: x} }

// Uint16 returns a UINT16 value.
func Uint16(x uint16) Value { return Value{Type: Uint16Type, v: x} }

// Int16 returns an INT16 value.
func Int16(x int16) Value { return Value{Type: Int16Type, v: x} }

// Uint32 returns a UINT32 value.
func Uint32(x uint32) Value { return Value{Type: Uint32Type, v: x} }

// Int32 returns an INT32 value.
func Int32(x int32) Value { return Value{Type: Int32Type, v: x} }

// Float32 returns a FLOAT32 value.
func Float32(x float32) Value { return Value{Type: Float32Type, v: x} }

// Bool returns a BOOL value.
func Bool(x bool) Value { return Value{Type: BoolType, v: x} }

// String returns a STRING value.
func String(x string) Value { return Value{Type: StringType, v: x} }

// Uint64 returns a UINT64 value.
func Uint64(x uint64) Value { return Value{Type: Uint64Type, v: x} }

// Int64 returns an INT64 value.
func Int64(x int64) Value { return Value{Type: Int64Type, v: x} }

// Float64 returns a FLOAT64 value.
func Float64(x float64) Value { return Value{Type: Float64Type, v: x} }

func arrayOf[T any](elem ValueType, xs []T) Value {
	if xs == nil {
		xs = []T{}
	}
	return Value{Type: ArrayType, elem: elem, v: xs}
}

// Uint8s returns an array of UINT8. The slice is shared, not copied.
func Uint8s(xs []uint8) Value { return arrayOf(Uint8Type, xs) }

// Int8s returns an array of INT8. The slice is shared, not copied.
func Int8s(xs []int8) Value { return arrayOf(Int8Type, xs) }

// Uint16s returns an array of UINT16. The slice is shared, not copied.
func Uint16s(xs []uint16) Value { return arrayOf(Uint16Type, xs) }

// Int16s returns an array of INT16. The slice is shared, not copied.
func Int16s(xs []int16) Value { return arrayOf(Int16Type, xs) }

// Uint32s returns an array of UINT32. The slice is shared, not copied.
func Uint32s(xs []uint32) Value { return arrayOf(Uint32Type, xs) }

// Int32s returns an array of INT32. The slice is shared, not copied.
func Int32s(xs []int32) Value { return arrayOf(Int32Type, xs) }

// Float32s returns an array of FLOAT32. The slice is shared, not copied.
func Float32s(xs []float32) Value { return arrayOf(Float32Type, xs) }

// Bools returns an array of BOOL. The slice is shared, not copied.
func Bools(xs []bool) Value { return arrayOf(BoolType, xs) }

// Strings returns an array of STRING. The slice is shared, not copied.
func Strings(xs []string) Value { return arrayOf(StringType, xs) }

// Uint64s returns an array of UINT64. The slice is shared, not copied.
func Uint64s(xs []uint64) Value { return arrayOf(Uint64Type, xs) }

// Int64s returns an array of INT64. The slice is shared, not copied.
func Int64s(xs []int64) Value { return arrayOf(Int64Type, xs) }

// Float64s returns an array of FLOAT64. The slice is shared, not copied.
func Float64s(xs []float64) Value { return arrayOf(Float64Type, xs) }

// Array returns an array whose elements have type elem; with elem ArrayType it builds an
// array of arrays, whose elements may each hold a different element type. Every element
// must have type elem: an array that breaks this is kept as given and refused when written
// (Writer.AddKV reports which element is wrong).
func Array(elem ValueType, elems ...Value) Value {
	if elem != ArrayType {
		if typed, ok := typedArray(elem, elems); ok {
			return typed
		}
	}
	if elems == nil {
		elems = []Value{}
	}
	return Value{Type: ArrayType, elem: elem, v: elems}
}

// typedArray converts elements that all have the scalar type elem into the typed slice that
// a parsed file would hold, so that equal arrays compare and read back the same however they
// were built.
func typedArray(elem ValueType, elems []Value) (Value, bool) {
	for _, e := range elems {
		if e.Type != elem || !holdsScalar(e) {
			return Value{}, false
		}
	}
	switch elem {
	case Uint8Type:
		return Uint8s(collect[uint8](elems)), true
	case Int8Type:
		return Int8s(collect[int8](elems)), true
	case Uint16Type:
		return Uint16s(collect[uint16](elems)), true
	case Int16Type:
		return Int16s(collect[int16](elems)), true
	case Uint32Type:
		return Uint32s(collect[uint32](elems)), true
	case Int32Type:
		return Int32s(collect[int32](elems)), true
	case Float32Type:
		return Float32s(collect[float32](elems)), true
	case BoolType:
		return Bools(collect[bool](elems)), true
	case StringType:
		return Strings(collect[string](elems)), true
	case Uint64Type:
		return Uint64s(collect[uint64](elems)), true
	case Int64Type:
		return Int64s(collect[int64](elems)), true
	case Float64Type:
		return Float64s(collect[float64](elems)), true
	}
	return Value{}, false
}

func collect[T any](elems []Value) []T {
	out := make([]T, len(elems))
	for i, e := range elems {
		out[i] = e.v.(T) // holdsScalar checked the dynamic type
	}
	return out
}

// holdsScalar reports whether v is a scalar whose Go value matches its Type.
func holdsScalar(v Value) bool {
	t, ok := scalarTypeOf(v.v)
	return ok && t == v.Type
}

// scalarTypeOf returns the GGUF type of a Go scalar held by a Value.
func scalarTypeOf(x any) (ValueType, bool) {
	switch x.(type) {
	case uint8:
		return Uint8Type, true
	case int8:
		return Int8Type, true
	case uint16:
		return Uint16Type, true
	case int16:
		return Int16Type, true
	case uint32:
		return Uint32Type, true
	case int32:
		return Int32Type, true
	case float32:
		return Float32Type, true
	case bool:
		return BoolType, true
	case string:
		return StringType, true
	case uint64:
		return Uint64Type, true
	case int64:
		return Int64Type, true
	case float64:
		return Float64Type, true
	}
	return 0, false
}

// arrayElemOf returns the element type of a typed slice held by an array Value.
func arrayElemOf(x any) (ValueType, bool) {
	switch x.(type) {
	case []uint8:
		return Uint8Type, true
	case []int8:
		return Int8Type, true
	case []uint16:
		return Uint16Type, true
	case []int16:
		return Int16Type, true
	case []uint32:
		return Uint32Type, true
	case []int32:
		return Int32Type, true
	case []float32:
		return Float32Type, true
	case []bool:
		return BoolType, true
	case []string:
		return StringType, true
	case []uint64:
		return Uint64Type, true
	case []int64:
		return Int64Type, true
	case []float64:
		return Float64Type, true
	}
	return 0, false
}
