package gguf

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// raw builds GGUF bytes by hand, field by field, for hostile-input tests.
type raw struct{ b []byte }

func newRaw(version uint32, nTensors, nKV uint64) *raw {
	r := &raw{b: []byte(Magic)}
	return r.u32(version).u64(nTensors).u64(nKV)
}

func (r *raw) u32(x uint32) *raw    { r.b = appendU32(r.b, x); return r }
func (r *raw) u64(x uint64) *raw    { r.b = appendU64(r.b, x); return r }
func (r *raw) str(s string) *raw    { r.b = appendString(r.b, s); return r }
func (r *raw) bytes(p ...byte) *raw { r.b = append(r.b, p...); return r }

// kv appends a key and a value with its type.
func (r *raw) kv(key string, v Value) *raw {
	r.str(key).u32(uint32(v.Type))
	r.b = appendValue(r.b, v)
	return r
}

// tensor appends a tensor info.
func (r *raw) tensor(name string, typ quant.Type, offset uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(offset)
}

// padTo appends zeros up to a multiple of align, then n more bytes of data.
func (r *raw) padTo(align int, n int) *raw {
	for len(r.b)%align != 0 {
		r.b = append(r.b, 0)
	}
	r.b = append(r.b, make([]byte, n)...)
	return r
}

// randValue returns a random value, an array nesting at most depth arrays deep in a third
// of the cases when depth > 0.
func randValue(rng *rand.Rand, depth int) Value {
	if depth > 0 && rng.IntN(3) == 0 {
		return randArray(rng, depth)
	}
	return randScalar(rng, scalarTypes[rng.IntN(len(scalarTypes))])
}

var scalarTypes = []ValueType{Uint8Type, Int8Type, Uint16Type, Int16Type, Uint32Type, Int32Type,
	Float32Type, BoolType, StringType, Uint64Type, Int64Type, Float64Type}

// randArray returns a random array nesting at most depth (>= 1) arrays deep: an array of
// arrays (each with its own element type) or an array of one scalar type.
func randArray(rng *rand.Rand, depth int) Value {
	n := rng.IntN(6)
	if depth > 1 && rng.IntN(3) == 0 {
		elems := make([]Value, n)
		for i := range elems {
			elems[i] = randArray(rng, depth-1)
		}
		return Array(ArrayType, elems...)
	}
	elem := scalarTypes[rng.IntN(len(scalarTypes))]
	elems := make([]Value, n)
	for i := range elems {
		elems[i] = randScalar(rng, elem)
	}
	return Array(elem, elems...)
}

// randScalar returns a random scalar of type t.
func randScalar(rng *rand.Rand, t ValueType) Value {
	switch t {
	case Uint8Type:
		return Uint8(uint8(rng.Uint32()))
	case Int8Type:
		return Int8(int8(rng.Uint32()))
	case Uint16Type:
		return Uint16(uint16(rng.Uint32()))
	case Int16Type:
		return Int16(int16(rng.Uint32()))
	case Uint32Type:
		return Uint32(rng.Uint32())
	case Int32Type:
		return Int32(int32(rng.Uint32()))
	case Float32Type:
		return Float32(math.Float32frombits(rng.Uint32()))
	case BoolType:
		return Bool(rng.IntN(2) == 1)
	case StringType:
		return String(randString(rng))
	case Uint64Type:
		return Uint64(rng.Uint64())
	case Int64Type:
		return Int64(int64(rng.Uint64()))
	}
	return Float64(math.Float64frombits(rng.Uint64()))
}

func randString(rng *rand.Rand) string {
	b := make([]byte, rng.IntN(12))
	for i := range b {
		b[i] = byte(rng.Uint32()) // arbitrary bytes, not only UTF-8
	}
	return string(b)
}

// tensorTypes are the element types the random tests write.
var tensorTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K, quant.I8, quant.I32, quant.F64}

// randTensor returns a random tensor with random bytes; some stream their data.
func randTensor(rng *rand.Rand, name string) (WriterTensor, []byte) {
	typ := tensorTypes[rng.IntN(len(tensorTypes))]
	dims := make([]uint64, 1+rng.IntN(MaxDims))
	dims[0] = uint64(typ.BlockSize() * (1 + rng.IntN(3)))
	for i := 1; i < len(dims); i++ {
		dims[i] = uint64(1 + rng.IntN(3))
	}
	size, err := tensorBytes(typ, dims)
	if err != nil {
		panic(err) // the test built a bad tensor
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	t := WriterTensor{Name: name, Type: typ, Dims: dims}
	if rng.IntN(2) == 0 {
		t.Data = data
	} else {
		chunk := 1 + rng.IntN(64)
		t.WriteData = func(w io.Writer) error {
			for p := data; len(p) > 0; {
				k := min(chunk, len(p))
				if _, err := w.Write(p[:k]); err != nil {
					return err
				}
				p = p[k:]
			}
			return nil
		}
	}
	return t, data
}

// sample is a randomly generated file and what it should read back as.
type sample struct {
	version   uint32
	alignment int
	kvs       []KV
	tensors   []WriterTensor
	data      [][]byte
}

func randSample(rng *rand.Rand) sample {
	s := sample{version: uint32(2 + rng.IntN(2)), alignment: DefaultAlignment}
	s.kvs = append(s.kvs, KV{KeyArchitecture, String("llama")})
	if rng.IntN(2) == 0 {
		s.alignment = 1 << rng.IntN(10)
		s.kvs = append(s.kvs, KV{KeyAlignment, Uint32(uint32(s.alignment))})
	}
	for i := range rng.IntN(8) {
		s.kvs = append(s.kvs, KV{"test.key" + string(rune('a'+i)), randValue(rng, 3)})
	}
	for i := range rng.IntN(6) {
		t, data := randTensor(rng, "blk."+string(rune('0'+i))+".weight")
		s.tensors = append(s.tensors, t)
		s.data = append(s.data, data)
	}
	return s
}

// encode writes a sample with Writer.
func (s sample) encode(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, s.version)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range s.kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range s.tensors {
		if err := w.AddTensor(tt); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
