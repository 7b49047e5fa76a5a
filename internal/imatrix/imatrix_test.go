package imatrix

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestLayout writes a file and checks its bytes field by field against the layout
// llama-imatrix writes, then reads it back.
func TestLayout(t *testing.T) {
	c := NewCollector()
	// 3 tokens of 2 channels: sums of squares 1+9+25 = 35 and 4+16+36 = 56.
	if err := c.Add("blk.0.attn_q.weight", []float32{1, 2, 3, 4, 5, 6}, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Add("blk.0.attn_q.weight", []float32{1, 2, 3}, 3); err == nil {
		t.Fatal("inputs of another width: no error")
	}
	f := c.File(2, 1, "cal.txt") // ncall = ceil(3/2) = 2
	b := f.Marshal()
	var want bytes.Buffer
	w := func(v any) { binary.Write(&want, binary.LittleEndian, v) }
	w(int32(1))
	w(int32(19))
	want.WriteString("blk.0.attn_q.weight")
	w(int32(2))
	w(int32(2))
	w([]float32{35.0 / 3 * 2, 56.0 / 3 * 2})
	w(int32(1))
	w(int32(7))
	want.WriteString("cal.txt")
	if !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("bytes\n%x\nwant\n%x", b, want.Bytes())
	}
	path := filepath.Join(t.TempDir(), "m.dat")
	if err := Write(path, f); err != nil {
		t.Fatal(err)
	}
	g, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	imp := g.Importance()["blk.0.attn_q.weight"]
	if g.Dataset != "cal.txt" || g.LastChunk != 1 || len(imp) != 2 ||
		math.Abs(float64(imp[0])-35.0/3) > 1e-5 || math.Abs(float64(imp[1])-56.0/3) > 1e-5 {
		t.Fatalf("read back %+v, importance %v", g, imp)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("%d files in the folder after Write, want 1", len(entries))
	}
}

func TestParseRefuses(t *testing.T) {
	good := (&File{Entries: []Entry{{Name: "a", NCall: 1, Values: []float32{1, 2}}}, LastChunk: 1, Dataset: "d"}).Marshal()
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(good); i++ {
		if i == 4+4+1+4+4+8 || i == 4+4+1+4+4+8+4 { // the optional trailer may be missing
			continue
		}
		if _, err := Parse(good[:i]); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
	}
	nan := (&File{Entries: []Entry{{Name: "a", NCall: 1, Values: []float32{float32(math.NaN())}}}}).Marshal()
	if _, err := Parse(nan); err == nil {
		t.Error("a NaN value: no error")
	}
	if _, err := Parse(append(good, 0)); err == nil {
		t.Error("trailing bytes: no error")
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&File{Entries: []Entry{{Name: "blk.0.ffn_down.weight", NCall: 3, Values: []float32{1, 2, 3}}}, LastChunk: 3, Dataset: "x"}).Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Parse(b)
		if err != nil {
			return
		}
		// What parses re-encodes to a file that parses to the same entries.
		h, err := Parse(g.Marshal())
		if err != nil || len(h.Entries) != len(g.Entries) {
			t.Fatalf("re-encoded file: %v, %d entries of %d", err, len(h.Entries), len(g.Entries))
		}
	})
}
