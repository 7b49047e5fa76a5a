package gguf

import (
	"math"
	"reflect"
	"testing"
)

func TestValueNumericAccessors(t *testing.T) {
	type want struct {
		u    uint64
		uOK  bool
		i    int64
		iOK  bool
		f    float64
		fOK  bool
		kind ValueType
	}
	cases := []struct {
		v Value
		w want
	}{
		{Uint8(200), want{200, true, 200, true, 200, true, Uint8Type}},
		{Int8(-3), want{0, false, -3, true, -3, true, Int8Type}},
		{Uint16(65535), want{65535, true, 65535, true, 65535, true, Uint16Type}},
		{Int16(-300), want{0, false, -300, true, -300, true, Int16Type}},
		{Uint32(1 << 31), want{1 << 31, true, 1 << 31, true, 1 << 31, true, Uint32Type}},
		{Int32(7), want{7, true, 7, true, 7, true, Int32Type}},
		{Uint64(math.MaxUint64), want{math.MaxUint64, true, 0, false, math.MaxUint64, true, Uint64Type}},
		{Int64(math.MinInt64), want{0, false, math.MinInt64, true, math.MinInt64, true, Int64Type}},
		{Float32(1.5), want{0, false, 0, false, 1.5, true, Float32Type}},
		{Float64(-2.25), want{0, false, 0, false, -2.25, true, Float64Type}},
		{Bool(true), want{0, false, 0, false, 0, false, BoolType}},
		{String("7"), want{0, false, 0, false, 0, false, StringType}},
		{Int32s([]int32{1}), want{0, false, 0, false, 0, false, ArrayType}},
		{Value{}, want{0, false, 0, false, 0, false, Uint8Type}},
	}
	for _, c := range cases {
		u, uOK := c.v.Uint64()
		i, iOK := c.v.Int64()
		f, fOK := c.v.Float64()
		got := want{u, uOK, i, iOK, f, fOK, c.v.Type}
		if got != c.w {
			t.Errorf("%s %v: got %+v, want %+v", c.v.Type, c.v.Any(), got, c.w)
		}
	}
}

func TestValueOtherAccessors(t *testing.T) {
	if s, ok := String("hi").String(); !ok || s != "hi" {
		t.Error("String")
	}
	if _, ok := Uint8(1).String(); ok {
		t.Error("String of UINT8")
	}
	if b, ok := Bool(true).Bool(); !ok || !b {
		t.Error("Bool")
	}
	if _, ok := Uint8(1).Bool(); ok {
		t.Error("Bool of UINT8")
	}
	if s, ok := Strings([]string{"a", "b"}).Strings(); !ok || !reflect.DeepEqual(s, []string{"a", "b"}) {
		t.Error("Strings")
	}
	if _, ok := Int32s(nil).Strings(); ok {
		t.Error("Strings of INT32 array")
	}
	if f, ok := Int16s([]int16{-1, 2}).Float32s(); !ok || !reflect.DeepEqual(f, []float32{-1, 2}) {
		t.Errorf("Float32s of INT16 array: %v %v", f, ok)
	}
	if _, ok := Strings([]string{"1"}).Float32s(); ok {
		t.Error("Float32s of strings")
	}
	if n, ok := Uint32s([]uint32{1, math.MaxInt32}).Int32s(); !ok || !reflect.DeepEqual(n, []int32{1, math.MaxInt32}) {
		t.Errorf("Int32s of UINT32 array: %v %v", n, ok)
	}
	if _, ok := Uint32s([]uint32{math.MaxInt32 + 1}).Int32s(); ok {
		t.Error("Int32s accepted a value over MaxInt32")
	}
	if _, ok := Float32s([]float32{1}).Int32s(); ok {
		t.Error("Int32s of FLOAT32 array")
	}
	nested := Array(ArrayType, Strings([]string{"x"}), Uint8s([]uint8{1, 2}))
	if _, ok := nested.Int32s(); ok {
		t.Error("Int32s of array of arrays")
	}
	elems, ok := nested.Array()
	if !ok || len(elems) != 2 || !elems[1].Equal(Uint8s([]uint8{1, 2})) {
		t.Errorf("Array of array of arrays: %v", elems)
	}
	if got := nested.Any(); !reflect.DeepEqual(got, []any{[]string{"x"}, []uint8{1, 2}}) {
		t.Errorf("Any: %#v", got)
	}
	if e, ok := nested.ElemType(); !ok || e != ArrayType || nested.Len() != 2 {
		t.Error("ElemType/Len of array of arrays")
	}
	if elems, ok := Float64s([]float64{1, 2}).Array(); !ok || !elems[1].Equal(Float64(2)) {
		t.Error("Array of FLOAT64 array")
	}
	if _, ok := Uint8(3).Array(); ok {
		t.Error("Array of a scalar")
	}
	if _, ok := Uint8(3).Index(0); ok {
		t.Error("Index of a scalar")
	}
}

func TestValueEqualAndArray(t *testing.T) {
	nan := math.Float32frombits(0x7fc00001)
	cases := []struct {
		a, b  Value
		equal bool
	}{
		{Array(StringType, String("a"), String("b")), Strings([]string{"a", "b"}), true},
		{Array(Uint8Type), Uint8s(nil), true},
		{Array(Float32Type, Float32(nan)), Float32s([]float32{nan}), true},
		{Float32(nan), Float32(nan), true},
		{Float32(0), Float32(float32(math.Copysign(0, -1))), false},
		{Uint8(1), Int8(1), false},
		{Uint8s([]uint8{1}), Int8s([]int8{1}), false},
		{Uint8s([]uint8{1}), Uint8s([]uint8{1, 2}), false},
		{Array(ArrayType), Array(ArrayType), true},
		{Array(ArrayType, Uint8s(nil)), Array(ArrayType, Int8s(nil)), false},
		{Array(ArrayType, Array(ArrayType, Bools([]bool{true}))), Array(ArrayType, Array(ArrayType, Bools([]bool{true}))), true},
		{Array(ArrayType, Array(ArrayType, Bools([]bool{true}))), Array(ArrayType, Array(ArrayType, Bools([]bool{false}))), false},
		{Array(Uint8Type, Uint8(1), Int8(1)), Uint8s([]uint8{1, 1}), false},
	}
	for i, c := range cases {
		if got := c.a.Equal(c.b); got != c.equal {
			t.Errorf("case %d: Equal = %v, want %v", i, got, c.equal)
		}
		if got := c.b.Equal(c.a); got != c.equal {
			t.Errorf("case %d: reversed Equal = %v, want %v", i, got, c.equal)
		}
	}
}

func TestValueTypeString(t *testing.T) {
	if Float64Type.String() != "FLOAT64" || ArrayType.String() != "ARRAY" || ValueType(13).String() != "ValueType(13)" {
		t.Error("ValueType.String")
	}
	if ValueType(13).Valid() || !Uint8Type.Valid() {
		t.Error("ValueType.Valid")
	}
}
