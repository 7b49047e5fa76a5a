package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// randomTensors makes n tensors of random types and shapes with random bytes.
func randomTensors(r *rand.Rand, n int) []WriteTensor {
	types := []DType{F32, F16, BF16, I8, U8, F64, I16, I32, I64, BOOL}
	var ts []WriteTensor
	for i := range n {
		dt := types[r.IntN(len(types))]
		shape := make([]int, r.IntN(4))
		for j := range shape {
			shape[j] = r.IntN(6)
		}
		t := WriteTensor{Name: fmt.Sprintf("layer.%d.w%d", r.IntN(1000), i), DType: dt, Shape: shape}
		t.Data = make([]byte, t.Size())
		for j := range t.Data {
			t.Data[j] = byte(r.Uint32())
		}
		ts = append(ts, t)
	}
	return ts
}

func checkSame(t *testing.T, want []WriteTensor, get func(string) (*TensorInfo, bool)) {
	t.Helper()
	for _, w := range want {
		g, ok := get(w.Name)
		if !ok {
			t.Fatalf("tensor %q missing", w.Name)
		}
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) && !(len(g.Shape) == 0 && len(w.Shape) == 0) || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("tensor %q: got %s %v, want %s %v (or data differs)", w.Name, g.DType, g.Shape, w.DType, w.Shape)
		}
	}
}

func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for trial := range 50 {
		ts := randomTensors(r, r.IntN(8))
		meta := map[string]string{"trial": fmt.Sprint(trial), "quote": `a"b<c>`}
		path := filepath.Join(dir, "m.safetensors")
		if err := Write(path, ts, meta, nil); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if len(f.Tensors) != len(ts) {
			t.Fatalf("trial %d: %d tensors, want %d", trial, len(f.Tensors), len(ts))
		}
		checkSame(t, ts, f.Tensor)
		if f.Metadata["format"] != "pt" || f.Metadata["trial"] != fmt.Sprint(trial) || f.Metadata["quote"] != `a"b<c>` {
			t.Fatalf("metadata %v", f.Metadata)
		}
		if (8+f.HeaderSize)%8 != 0 {
			t.Fatalf("data starts at %d, not 8-aligned", 8+f.HeaderSize)
		}
		// Data lie in sorted name order.
		var order []string
		for _, tn := range f.Tensors {
			if len(tn.Data) > 0 {
				order = append(order, tn.Name)
			}
		}
		if !slices.IsSorted(order) {
			t.Fatalf("data order %v is not sorted", order)
		}
		f.Close()
	}
}

func TestWriteHeaderFormat(t *testing.T) {
	var buf bytes.Buffer
	ts := []WriteTensor{
		{Name: "z", DType: F32, Shape: []int{1}, Data: []byte{1, 2, 3, 4}},
		{Name: "a", DType: U8, Shape: []int{2}, Data: []byte{5, 6}},
	}
	if err := Encode(&buf, ts, nil, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	hdr := string(b[8 : 8+n])
	want := `{"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"z":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}`
	if strings.TrimRight(hdr, " ") != want {
		t.Fatalf("header %q\nwant %q", hdr, want)
	}
	if n%8 != 0 || len(hdr)-len(want) >= 8 {
		t.Fatalf("header length %d: padding wrong", n)
	}
	if !bytes.Equal(b[8+n:], []byte{5, 6, 1, 2, 3, 4}) {
		t.Fatalf("data %v", b[8+n:])
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(hdr), &m); err != nil {
		t.Fatal(err)
	}
}

func TestWriteStreamAndProgress(t *testing.T) {
	big := make([]byte, 9<<20) // more than two chunks
	for i := range big {
		big[i] = byte(i * 7)
	}
	ts := []WriteTensor{
		{Name: "big", DType: U8, Shape: []int{len(big)}, Data: big},
		{Name: "streamed", DType: F16, Shape: []int{3, 1000}, Stream: func(w io.Writer) error {
			row := make([]byte, 2000)
			for i := range 3 {
				for j := range row {
					row[j] = byte(i + j)
				}
				if _, err := w.Write(row); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	var calls []int64
	var lastTotal int64
	path := filepath.Join(t.TempDir(), "s.safetensors")
	err := Write(path, ts, nil, func(done, total int64) {
		calls = append(calls, done)
		lastTotal = total
	})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(big) + 6000)
	if lastTotal != total || calls[len(calls)-1] != total || !slices.IsSorted(calls) || len(calls) < 4 {
		t.Fatalf("progress calls %v, total %d", calls, lastTotal)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, _ := f.Tensor("streamed")
	if len(s.Data) != 6000 || s.Data[2000+5] != 6 {
		t.Fatalf("streamed tensor wrong")
	}
	b, _ := f.Tensor("big")
	if !bytes.Equal(b.Data, big) {
		t.Fatal("big tensor differs")
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	short := func(w io.Writer) error { _, err := w.Write([]byte{1}); return err }
	long := func(w io.Writer) error { _, err := w.Write(make([]byte, 5)); return err }
	failing := func(w io.Writer) error { return errors.New("source failed") }
	tests := []struct {
		name string
		ts   []WriteTensor
		want string
	}{
		{"dup", []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}, {Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, "twice"},
		{"no name", []WriteTensor{{DType: U8, Shape: []int{1}, Data: []byte{1}}}, "no name"},
		{"reserved", []WriteTensor{{Name: "__metadata__", DType: U8, Shape: []int{1}, Data: []byte{1}}}, "reserved"},
		{"dtype", []WriteTensor{{Name: "a", DType: "Q8", Shape: []int{1}, Data: []byte{1}}}, "unknown dtype"},
		{"size", []WriteTensor{{Name: "a", DType: F32, Shape: []int{2}, Data: []byte{1}}}, "needs 8 bytes"},
		{"negative", []WriteTensor{{Name: "a", DType: F32, Shape: []int{-2}}}, "invalid"},
		{"short stream", []WriteTensor{{Name: "a", DType: F32, Shape: []int{1}, Stream: short}}, "wrote 1 bytes, want 4"},
		{"long stream", []WriteTensor{{Name: "a", DType: F32, Shape: []int{1}, Stream: long}}, "past"},
		{"failing stream", []WriteTensor{{Name: "a", DType: F32, Shape: []int{1}, Stream: failing}}, "source failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".safetensors")
			err := Write(path, tt.ts, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
			if _, err := os.Stat(path); err == nil {
				t.Error("a failed write left a file behind")
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}
}
