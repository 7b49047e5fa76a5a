package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// build assembles a file from a literal JSON header and data, independently of the writer.
func build(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestParseHandWritten(t *testing.T) {
	data := make([]byte, 0, 30)
	for _, v := range []float32{1, 2, 3, 4} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	data = append(data, 0x3c, 0x00, 0x00, 0x40) // F16 1.0, 2.0... (only bytes matter)
	data = append(data, 7, 8, 9)
	// Tensors listed out of data order; a scalar; an empty tensor.
	hdr := `{"b":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},` +
		`"__metadata__":{"format":"pt","x":"y"},` +
		`"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},` +
		`"empty":{"dtype":"BF16","shape":[0,5],"data_offsets":[20,20]},` +
		`"c":{"dtype":"U8","shape":[3],"data_offsets":[20,23]},` +
		`"s":{"dtype":"I8","shape":[],"data_offsets":[23,24]}}   `
	data = append(data, 0xff)
	f, err := Parse("hand.safetensors", build(hdr, data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" || f.Metadata["x"] != "y" {
		t.Errorf("metadata %v", f.Metadata)
	}
	if got := f.Names(); !slices.Equal(got, []string{"a", "b", "c", "empty", "s"}) {
		t.Errorf("names %v", got)
	}
	var order []string
	for _, tn := range f.Tensors {
		order = append(order, tn.Name)
	}
	if !slices.Equal(order, []string{"a", "b", "c", "empty", "s"}) && !slices.Equal(order, []string{"a", "b", "empty", "c", "s"}) {
		t.Errorf("file order %v", order)
	}
	a, _ := f.Tensor("a")
	if a.DType != F32 || !slices.Equal(a.Shape, []int{2, 2}) || math.Float32frombits(binary.LittleEndian.Uint32(a.Data[12:])) != 4 {
		t.Errorf("tensor a: %+v", a)
	}
	if a.Offset != int64(8+len(hdr)) || a.Elements() != 4 {
		t.Errorf("tensor a offset %d, elements %d", a.Offset, a.Elements())
	}
	c, _ := f.Tensor("c")
	if !bytes.Equal(c.Data, []byte{7, 8, 9}) {
		t.Errorf("tensor c data %v", c.Data)
	}
	s, _ := f.Tensor("s")
	if len(s.Shape) != 0 || !bytes.Equal(s.Data, []byte{0xff}) || s.Elements() != 1 {
		t.Errorf("scalar s: %+v", s)
	}
	e, _ := f.Tensor("empty")
	if len(e.Data) != 0 || e.Elements() != 0 {
		t.Errorf("empty tensor: %+v", e)
	}
	if _, ok := f.Tensor("__metadata__"); ok {
		t.Error("__metadata__ listed as a tensor")
	}
}

func TestParseErrors(t *testing.T) {
	d16 := make([]byte, 16)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short prefix", []byte{1, 0, 0}, "too short"},
		{"header too long", build(`{}`, nil)[:9], "exceeds the 1 bytes"},
		{"header huge", binary.LittleEndian.AppendUint64(nil, 200<<20), "byte limit"},
		{"not an object", build(`[1]`, nil), "does not start"},
		{"bad json", build(`{"a":`, nil), "header"},
		{"bad metadata", build(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
		{"unknown dtype", build(`{"t":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}}`, d16), `tensor "t": unknown dtype "Q4"`},
		{"missing shape", build(`{"t":{"dtype":"F32","data_offsets":[0,16]}}`, d16), `tensor "t": shape missing`},
		{"bad offsets", build(`{"t":{"dtype":"F32","shape":[4],"data_offsets":[0]}}`, d16), "2"},
		{"out of bounds", build(`{"t":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}`, d16), "out of bounds"},
		{"reversed", build(`{"t":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}}`, d16), "out of bounds"},
		{"size mismatch", build(`{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}`, d16), "needs 12 bytes"},
		{"negative dim", build(`{"t":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}`, d16), "negative"},
		{"overflow", build(`{"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}`, d16), "overflow"},
		{"unknown field", build(`{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}}`, d16), "unknown field"},
		{"overlap", build(`{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"u":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, d16), "overlaps"},
		{"gap", build(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, d16), "gap"},
		{"trailing data", build(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, d16), "cover 8 bytes of the 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.safetensors", tt.file)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "x.safetensors") {
				t.Fatalf("error %q should name the file and mention %q", err, tt.want)
			}
		})
	}
}

func TestOpenMapsReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	file := build(`{"t":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}      `, []byte("abcdefgh"))
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := f.Tensor("t")
	if string(tn.Data) != "abcdefgh" || cap(tn.Data) != 8 {
		t.Fatalf("data %q cap %d", tn.Data, cap(tn.Data))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	for _, bad := range []string{"missing.safetensors", "."} {
		if _, err := Open(filepath.Join(filepath.Dir(path), bad)); err == nil {
			t.Errorf("Open(%s): no error", bad)
		}
	}
	os.WriteFile(path, binary.LittleEndian.AppendUint64(nil, 1000), 0o644)
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "m.safetensors") {
		t.Errorf("bad header length: error %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(build(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}}`, make([]byte, 12)))
	f.Add(build(`{"s":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}}`, []byte{1}))
	f.Add(build(`{}`, nil))
	f.Add(build(`{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"u":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, make([]byte, 16)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		// Accepted files tile their data area exactly and survive a rewrite.
		var covered int
		var ws []WriteTensor
		for _, tn := range file.Tensors {
			if int64(len(tn.Data)) != int64(tn.Elements())*int64(tn.DType.Size()) {
				t.Fatalf("tensor %q: %d bytes for %s %v", tn.Name, len(tn.Data), tn.DType, tn.Shape)
			}
			covered += len(tn.Data)
			ws = append(ws, WriteTensor{Name: tn.Name, DType: tn.DType, Shape: tn.Shape, Data: tn.Data})
		}
		if covered != len(data)-8-file.HeaderSize {
			t.Fatalf("tensors cover %d of %d data bytes", covered, len(data)-8-file.HeaderSize)
		}
		var buf bytes.Buffer
		if err := Encode(&buf, ws, file.Metadata, nil); err != nil {
			t.Fatal(err)
		}
		again, err := Parse("again", buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range file.Tensors {
			u, ok := again.Tensor(tn.Name)
			if !ok || !bytes.Equal(u.Data, tn.Data) || !slices.Equal(u.Shape, tn.Shape) || u.DType != tn.DType {
				t.Fatalf("tensor %q changed in the rewrite", tn.Name)
			}
		}
	})
}
