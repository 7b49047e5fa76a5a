package llama2c

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

var stories260K = Config{Dim: 64, HiddenDim: 172, Layers: 5, Heads: 8, KVHeads: 4, VocabSize: 512, SeqLen: 512, SharedClassifier: true}

func f32(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

func TestOpenStories260K(t *testing.T) {
	path := testdata.Path(t, "models/stories260K/stories260K.bin")
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config != stories260K {
		t.Fatalf("config = %+v, want %+v", c.Config, stories260K)
	}
	if got, want := len(c.Tensors), 2+5*9; got != want {
		t.Fatalf("%d tensors, want %d", got, want)
	}
	if _, ok := c.Tensor("output.weight"); ok {
		t.Error("shared classifier but output.weight present")
	}
	shapes := map[string][]int{
		"token_embd.weight":        {512, 64},
		"blk.0.attn_norm.weight":   {64},
		"blk.4.attn_q.weight":      {64, 64},
		"blk.2.attn_k.weight":      {32, 64},
		"blk.2.attn_v.weight":      {32, 64},
		"blk.1.attn_output.weight": {64, 64},
		"blk.3.ffn_norm.weight":    {64},
		"blk.0.ffn_gate.weight":    {172, 64},
		"blk.0.ffn_down.weight":    {64, 172},
		"blk.0.ffn_up.weight":      {172, 64},
		"output_norm.weight":       {64},
	}
	for name, shape := range shapes {
		tn, ok := c.Tensor(name)
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if !slices.Equal(tn.Shape, shape) {
			t.Errorf("%s shape %v, want %v", name, tn.Shape, shape)
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		if len(tn.Data) != 4*n {
			t.Errorf("%s has %d bytes, want %d", name, len(tn.Data), 4*n)
		}
	}
	// RMSNorm weights of a trained model are positive-ish and far from garbage; embeddings are
	// small. Garbage from a wrong offset would show up as huge or NaN values.
	for _, tn := range c.Tensors {
		for i := range len(tn.Data) / 4 {
			v := f32(tn.Data, i)
			if math.IsNaN(float64(v)) || math.Abs(float64(v)) > 100 {
				t.Fatalf("%s[%d] = %v: implausible weight", tn.Name, i, v)
			}
		}
	}
	// The legacy rotary tables sit where the layout says: row 0 is cos 0 = 1, sin 0 = 0, and
	// every entry matches cos/sin of p*theta_i. This pins every offset before them.
	want := ropeTables(c.Config)
	for i := range len(want) / 4 {
		if d := math.Abs(float64(f32(c.Rope, i) - f32(want, i))); d > 1e-3 {
			t.Fatalf("rope table entry %d = %v, computed %v", i, f32(c.Rope, i), f32(want, i))
		}
	}
}

func TestRoundTripStories260K(t *testing.T) {
	path := testdata.Path(t, "models/stories260K/stories260K.bin")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(path, orig)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, c.Config, c.Tensors, c.Rope); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), orig) {
		t.Fatal("rewritten checkpoint differs from the original")
	}
}

// synth builds a small checkpoint whose every float is its own index, so that any offset
// error shows up in the values.
func synth(t *testing.T, cfg Config) (tensors []Tensor, file []byte) {
	t.Helper()
	lay, err := NewLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range lay.Entries {
		data := make([]byte, e.Size)
		for i := range int(e.Size / 4) {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32((e.Offset-HeaderSize)/4+int64(i))))
		}
		tensors = append(tensors, Tensor{Name: e.Name, Shape: e.Shape, Data: data})
	}
	var buf bytes.Buffer
	if err := Write(&buf, cfg, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != lay.FileSize {
		t.Fatalf("wrote %d bytes, layout says %d", buf.Len(), lay.FileSize)
	}
	return tensors, buf.Bytes()
}

func TestWriteOpenUnshared(t *testing.T) {
	cfg := Config{Dim: 8, HiddenDim: 12, Layers: 2, Heads: 2, KVHeads: 1, VocabSize: 10, SeqLen: 6}
	tensors, file := synth(t, cfg)
	path := filepath.Join(t.TempDir(), "m.bin")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config != cfg {
		t.Fatalf("config %+v, want %+v", c.Config, cfg)
	}
	if got := int32(binary.LittleEndian.Uint32(file[20:])); got != -10 {
		t.Fatalf("vocab_size on disk %d, want -10", got)
	}
	if len(c.Tensors) != len(tensors) {
		t.Fatalf("%d tensors, want %d", len(c.Tensors), len(tensors))
	}
	for i, want := range tensors {
		got := c.Tensors[i]
		if got.Name != want.Name || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("tensor %d: got %s %v, want %s %v (or data differs)", i, got.Name, got.Shape, want.Name, want.Shape)
		}
	}
	out, ok := c.Tensor("output.weight")
	if !ok {
		t.Fatal("output.weight missing")
	}
	// The classifier follows the rotary tables: its first float's index is the file's float
	// count minus its own size.
	if v, want := f32(out.Data, 0), float32((len(file)-HeaderSize)/4-10*8); v != want {
		t.Errorf("output.weight[0] = %v, want %v", v, want)
	}
	if w, _ := c.Tensor("blk.1.attn_k.weight"); !slices.Equal(w.Shape, []int{4, 8}) {
		t.Errorf("attn_k shape %v, want [4 8]", w.Shape)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func header(vals ...int32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func TestParseErrors(t *testing.T) {
	_, good := synth(t, Config{Dim: 8, HiddenDim: 12, Layers: 2, Heads: 2, KVHeads: 2, VocabSize: 10, SeqLen: 6, SharedClassifier: true})
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "header needs 28 bytes"},
		{"short header", good[:20], "header needs 28 bytes"},
		{"truncated", good[:len(good)-4], "calls for"},
		{"extra", append(slices.Clone(good), 0, 0, 0, 0), "calls for"},
		{"zero dim", header(0, 12, 2, 2, 2, 10, 6), "dim 0 is out of range"},
		{"negative layers", header(8, 12, -1, 2, 2, 10, 6), "n_layers -1"},
		{"min vocab", header(8, 12, 2, 2, 2, math.MinInt32, 6), "vocab_size"},
		{"heads not dividing", header(8, 12, 2, 3, 3, 10, 6), "does not divide dim"},
		{"kv not dividing", header(8, 12, 2, 4, 3, 10, 6), "does not divide n_heads"},
		{"kv above heads", header(8, 12, 2, 2, 4, 10, 6), "does not divide n_heads"},
		{"odd head", header(6, 12, 2, 2, 2, 10, 6), "odd"},
		{"overflow", header(1<<30, math.MaxInt32, math.MaxInt32, 2, 2, math.MaxInt32, math.MaxInt32), "overflow"},
		{"huge but sane", header(1<<14, 1<<16, 1<<10, 128, 8, 1<<20, 1<<20), "calls for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.bin", tt.data)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "x.bin") {
				t.Fatalf("error %q does not mention %q and the file name", err, tt.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.bin")); err == nil {
		t.Error("missing file: no error")
	}
	short := filepath.Join(dir, "short.bin")
	os.WriteFile(short, header(8, 12, 2, 2, 2, 10, 6), 0o644)
	if _, err := Open(short); err == nil || !strings.Contains(err.Error(), "short.bin") {
		t.Errorf("short file: error %v", err)
	}
	empty := filepath.Join(dir, "empty.bin")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty); err == nil {
		t.Error("empty file: no error")
	}
}

func TestWriteErrors(t *testing.T) {
	cfg := Config{Dim: 8, HiddenDim: 12, Layers: 1, Heads: 2, KVHeads: 2, VocabSize: 10, SeqLen: 6, SharedClassifier: true}
	tensors, _ := synth(t, cfg)
	var buf bytes.Buffer
	if err := Write(&buf, cfg, tensors[1:], nil); err == nil {
		t.Error("missing tensor: no error")
	}
	bad := slices.Clone(tensors)
	bad[2].Shape = []int{1, 2}
	if err := Write(&buf, cfg, bad, nil); err == nil || !strings.Contains(err.Error(), bad[2].Name) {
		t.Errorf("wrong shape: error %v", err)
	}
	dup := append(slices.Clone(tensors[1:]), tensors[1])
	if err := Write(&buf, cfg, dup, nil); err == nil {
		t.Error("duplicate tensor: no error")
	}
	if err := Write(&buf, cfg, tensors, []byte{1, 2, 3}); err == nil {
		t.Error("wrong rope size: no error")
	}
}

func FuzzParse(f *testing.F) {
	cfg := Config{Dim: 4, HiddenDim: 6, Layers: 1, Heads: 2, KVHeads: 1, VocabSize: 3, SeqLen: 2, SharedClassifier: true}
	lay, _ := NewLayout(cfg)
	f.Add(append(cfg.AppendHeader(nil), make([]byte, lay.FileSize-HeaderSize)...))
	cfg.SharedClassifier = false
	lay, _ = NewLayout(cfg)
	f.Add(append(cfg.AppendHeader(nil), make([]byte, lay.FileSize-HeaderSize)...))
	f.Add(header(8, 12, 2, 2, 2, 10, 6))
	f.Add(header(math.MaxInt32, math.MaxInt32, math.MaxInt32, 1, 1, -math.MaxInt32, math.MaxInt32))
	// Headers with counts far beyond any real model's: 2000 layers of width 2 in a file of
	// the size they call for, and 2^31-1 layers in a small file.
	deep := Config{Dim: 2, HiddenDim: 1, Layers: 2000, Heads: 1, KVHeads: 1, VocabSize: 1, SeqLen: 1, SharedClassifier: true}
	lay, _ = NewLayout(deep)
	f.Add(append(deep.AppendHeader(nil), make([]byte, lay.FileSize-HeaderSize)...))
	f.Add(append(header(2, 1, math.MaxInt32, 1, 1, 1, 1), make([]byte, 4096)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		var total int
		for _, tn := range c.Tensors {
			total += len(tn.Data)
		}
		if total+len(c.Rope)+HeaderSize != len(data) {
			t.Fatalf("tensors cover %d bytes of %d", total+len(c.Rope)+HeaderSize, len(data))
		}
		var buf bytes.Buffer
		if err := Write(&buf, c.Config, c.Tensors, c.Rope); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatal("round trip differs")
		}
	})
}
