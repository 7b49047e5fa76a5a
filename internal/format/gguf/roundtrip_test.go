package gguf

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// checkSample checks that a parsed file holds exactly what the sample wrote, laid out the
// way llama.cpp expects: tensors in order, each at the previous one's aligned end.
func checkSample(t *testing.T, s sample, f *File) {
	t.Helper()
	if f.Version != s.version || f.Alignment != s.alignment {
		t.Fatalf("version %d alignment %d, want %d and %d", f.Version, f.Alignment, s.version, s.alignment)
	}
	if len(f.KV) != len(s.kvs) {
		t.Fatalf("%d kvs, want %d", len(f.KV), len(s.kvs))
	}
	for i, kv := range s.kvs {
		if f.KV[i].Key != kv.Key || !f.KV[i].Value.Equal(kv.Value) {
			t.Fatalf("kv %d: got %q=%v, want %q=%v", i, f.KV[i].Key, f.KV[i].Value.Any(), kv.Key, kv.Value.Any())
		}
		if v, ok := f.Get(kv.Key); !ok || !v.Equal(kv.Value) {
			t.Fatalf("Get(%q) does not match", kv.Key)
		}
	}
	if len(f.Tensors) != len(s.tensors) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(s.tensors))
	}
	var next uint64
	for i, want := range s.tensors {
		ti, ok := f.Tensor(want.Name)
		if !ok || ti != &f.Tensors[i] {
			t.Fatalf("tensor %q not found at index %d", want.Name, i)
		}
		if ti.Type != want.Type || !equalDims(ti.Dims, want.Dims) {
			t.Fatalf("tensor %q: %s %v, want %s %v", ti.Name, ti.Type, ti.Dims, want.Type, want.Dims)
		}
		if ti.Offset != next {
			t.Fatalf("tensor %q at offset %d, want %d", ti.Name, ti.Offset, next)
		}
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, s.data[i]) {
			t.Fatalf("tensor %q: data differs", ti.Name)
		}
		next, _ = alignUp(ti.Offset+uint64(len(data)), uint64(f.Alignment))
	}
	if f.DataOffset%int64(f.Alignment) != 0 {
		t.Fatalf("data section at %d is not aligned to %d", f.DataOffset, f.Alignment)
	}
	if len(s.tensors) > 0 && f.Size != f.DataOffset+int64(next) {
		t.Fatalf("file size %d, want %d", f.Size, f.DataOffset+int64(next))
	}
}

func equalDims(a, b []uint64) bool {
	return len(a) == len(b) && bytes.Equal(dimBytes(a), dimBytes(b))
}

func dimBytes(d []uint64) []byte {
	var b []byte
	for _, x := range d {
		b = appendU64(b, x)
	}
	return b
}

// TestRoundTripRandom writes random files (every value type, nested arrays, tensors of
// several types, some streamed, random alignments, versions 2 and 3) and reads them back.
func TestRoundTripRandom(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := randSample(rng)
		data := s.encode(t)
		f, err := Parse("random.gguf", data)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkSample(t, s, f)
		// Encoding what was read gives the same bytes again.
		if again := rewrite(t, f); !bytes.Equal(again, data) {
			t.Fatalf("seed %d: rewriting the parsed file changed it", seed)
		}
	}
}

func TestWriteFileOpen(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := randSample(rng)
	for len(s.tensors) < 3 {
		tt, data := randTensor(rng, "extra."+string(rune('a'+len(s.tensors))))
		s.tensors = append(s.tensors, tt)
		s.data = append(s.data, data)
	}
	s.version = 3
	path := filepath.Join(t.TempDir(), "model.gguf")
	var calls int
	var last, total int64
	progress := func(done, all int64) {
		if done < last || done > all {
			t.Errorf("progress %d of %d after %d", done, all, last)
		}
		calls++
		last, total = done, all
	}
	if err := WriteFile(path, s.kvs, s.tensors, progress); err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, d := range s.data {
		want += int64(len(d))
	}
	if calls < len(s.tensors) || last != want || total != want {
		t.Errorf("progress: %d calls, last %d of %d, want %d of %d", calls, last, total, want, want)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSample(t, s, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.TensorData(&f.Tensors[0]); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("TensorData after Close: %v", err)
	}
}

func TestWriteFileFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.gguf")
	boom := errors.New("boom")
	tensors := []WriterTensor{{Name: "w", Type: quant.F32, Dims: []uint64{4},
		WriteData: func(w io.Writer) error { return boom }}}
	err := WriteFile(path, []KV{{KeyArchitecture, String("llama")}}, tensors, nil)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `tensor "w"`) {
		t.Fatalf("error %v: want boom naming the file and tensor", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left %d files behind", len(entries))
	}
}

func TestWriterErrors(t *testing.T) {
	f32 := func(name string, dims ...uint64) WriterTensor {
		n, _ := elementCount(dims)
		return WriterTensor{Name: name, Type: quant.F32, Dims: dims, Data: make([]byte, 4*n)}
	}
	cases := []struct {
		name string
		do   func(w *Writer) error
		want string
	}{
		{"duplicate key", func(w *Writer) error {
			w.AddKV("a", Uint8(1))
			return w.AddKV("a", Uint8(2))
		}, `kv "a": duplicate key`},
		{"empty key", func(w *Writer) error { return w.AddKV("", Uint8(1)) }, "key must be"},
		{"zero value", func(w *Writer) error { return w.AddKV("a", Value{}) }, "UINT8 value holds <nil>"},
		{"mismatched value", func(w *Writer) error { return w.AddKV("a", Value{Type: StringType, v: 3}) }, "STRING value holds int"},
		{"mixed array", func(w *Writer) error { return w.AddKV("a", Array(Uint8Type, Uint8(1), String("x"))) }, "element 1 has type STRING"},
		{"bad nested element", func(w *Writer) error {
			return w.AddKV("a", Array(ArrayType, Strings(nil), Array(Int8Type, Int8(1), Uint8(2))))
		}, "array element 1: array of INT8: element 1 has type UINT8"},
		{"too deep", func(w *Writer) error {
			v := Uint8s(nil)
			for range MaxArrayDepth {
				v = Array(ArrayType, v)
			}
			return w.AddKV("a", v)
		}, "nested more than"},
		{"alignment type", func(w *Writer) error { return w.AddKV(KeyAlignment, Uint64(32)) }, "want UINT32"},
		{"alignment 48", func(w *Writer) error { return w.AddKV(KeyAlignment, Uint32(48)) }, "not a power of two"},
		{"SetAlignment 0", func(w *Writer) error { return w.SetAlignment(0) }, "not a power of two"},
		{"long name", func(w *Writer) error { return w.AddTensor(f32(strings.Repeat("x", 64), 4)) }, "name must be"},
		{"duplicate tensor", func(w *Writer) error {
			w.AddTensor(f32("w", 4))
			return w.AddTensor(f32("w", 4))
		}, `tensor "w": duplicate name`},
		{"no dims", func(w *Writer) error { return w.AddTensor(f32("w")) }, "0 dimensions"},
		{"five dims", func(w *Writer) error { return w.AddTensor(f32("w", 1, 1, 1, 1, 1)) }, "5 dimensions"},
		{"short data", func(w *Writer) error {
			return w.AddTensor(WriterTensor{Name: "w", Type: quant.F32, Dims: []uint64{4}, Data: make([]byte, 15)})
		}, "needs 16 bytes of data, have 15"},
		{"unknown type", func(w *Writer) error {
			return w.AddTensor(WriterTensor{Name: "w", Type: 99, Dims: []uint64{4}})
		}, "unknown tensor type 99"},
		{"partial block", func(w *Writer) error {
			return w.AddTensor(WriterTensor{Name: "w", Type: quant.Q4_0, Dims: []uint64{48}})
		}, "not a multiple of the block size 32"},
		{"dims overflow", func(w *Writer) error { return w.AddTensor(f32("w", 1<<32, 1<<32)) }, "overflows"},
		{"stream too short", func(w *Writer) error {
			w.AddTensor(WriterTensor{Name: "w", Type: quant.F32, Dims: []uint64{4},
				WriteData: func(w io.Writer) error { _, err := w.Write(make([]byte, 12)); return err }})
			return w.Finish()
		}, "wrote 12 bytes, want 16"},
		{"stream too long", func(w *Writer) error {
			w.AddTensor(WriterTensor{Name: "w", Type: quant.F32, Dims: []uint64{4},
				WriteData: func(w io.Writer) error { _, err := w.Write(make([]byte, 20)); return err }})
			return w.Finish()
		}, "4 bytes over"},
		{"finish twice", func(w *Writer) error {
			w.Finish()
			return w.Finish()
		}, "Finish called twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := NewWriter(io.Discard, 3)
			if err != nil {
				t.Fatal(err)
			}
			w.Name = "out.gguf"
			err = c.do(w)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "gguf out.gguf: ") {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := NewWriter(io.Discard, 1); err == nil {
		t.Error("NewWriter accepted version 1")
	}
}

func TestSetAlignmentReplaces(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, 3)
	must(t, w.SetAlignment(64))
	must(t, w.AddKV("a", String("x")))
	must(t, w.SetAlignment(128))
	must(t, w.AddTensor(WriterTensor{Name: "w", Type: quant.F32, Dims: []uint64{3}, Data: make([]byte, 12)}))
	must(t, w.Finish())
	f, err := Parse("x.gguf", buf.Bytes())
	must(t, err)
	if f.Alignment != 128 || len(f.KV) != 2 || f.DataOffset%128 != 0 || f.Size%128 != 0 {
		t.Fatalf("alignment %d, %d kvs, data at %d, size %d", f.Alignment, len(f.KV), f.DataOffset, f.Size)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
