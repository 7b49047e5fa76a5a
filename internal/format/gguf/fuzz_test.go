package gguf

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// FuzzParse parses arbitrary bytes. Parse must never panic, must name the input in every
// error, and whatever it accepts must hand out in-bounds tensor data and, written again by
// Writer, read back the same.
func FuzzParse(f *testing.F) {
	for seed := range uint64(12) {
		s := randSample(rand.New(rand.NewPCG(seed, 99)))
		data := s.encode(f)
		f.Add(data)
		f.Add(data[:len(data)*2/3])
	}
	f.Add(newRaw(3, 0, 1).kv(KeyAlignment, Uint32(8)).b)
	f.Add(newRaw(2, 1, 0).tensor("odd", 200, 0, 3).padTo(32, 0).b)
	f.Add(newRaw(3, 2, 0).tensor("a", quant.F32, 32, 16).tensor("b", quant.F32, 0, 4).padTo(32, 96).b)
	f.Add(newRaw(3, 1, 0).tensor("w", quant.F32, 0, 0, 1<<63).padTo(32, 0).b)
	f.Add([]byte("GGUF"))

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.gguf", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf fuzz.gguf: ") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		for _, kv := range file.KV {
			if _, ok := file.Get(kv.Key); !ok {
				t.Fatalf("Get(%q) missed", kv.Key)
			}
			kv.Value.Any()
			kv.Value.Float32s()
			kv.Value.Int32s()
		}
		reencode := true
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			b, err := file.TensorData(ti)
			if !ti.Type.Known() {
				reencode = false
				if err == nil {
					t.Fatalf("tensor %q of unknown type gave data", ti.Name)
				}
				continue
			}
			if err != nil {
				t.Fatalf("accepted tensor %q has no data: %v", ti.Name, err)
			}
			size, _ := ti.Size()
			if uint64(len(b)) != size {
				t.Fatalf("tensor %q: %d bytes, want %d", ti.Name, len(b), size)
			}
		}
		if !reencode {
			return
		}
		var buf bytes.Buffer
		w, _ := NewWriter(&buf, file.Version)
		for _, kv := range file.KV {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				return // keys the writer refuses (empty ones) end the check
			}
		}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			b, _ := file.TensorData(ti)
			if err := w.AddTensor(WriterTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: b}); err != nil {
				return // names or shapes the writer refuses end the check
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		again, err := Parse("again.gguf", buf.Bytes())
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(again.KV) != len(file.KV) || len(again.Tensors) != len(file.Tensors) {
			t.Fatal("rewritten file lost entries")
		}
		for i, kv := range file.KV {
			if again.KV[i].Key != kv.Key || !again.KV[i].Value.Equal(kv.Value) {
				t.Fatalf("kv %q changed", kv.Key)
			}
		}
		for i := range file.Tensors {
			a, b := &file.Tensors[i], &again.Tensors[i]
			da, _ := file.TensorData(a)
			db, err := again.TensorData(b)
			if err != nil || a.Name != b.Name || a.Type != b.Type || !equalDims(a.Dims, b.Dims) || !bytes.Equal(da, db) {
				t.Fatalf("tensor %q changed (%v)", a.Name, err)
			}
		}
	})
}
