package safetensors

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWriteShardedOpenDir(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ts := randomTensors(r, 40)
	for i := range ts { // make every tensor non-trivial so shards split
		ts[i].DType, ts[i].Shape = U8, []int{10 + i}
		ts[i].Data = make([]byte, 10+i)
		ts[i].Data[0] = byte(i)
	}
	dir := t.TempDir()
	var last int64
	if err := WriteSharded(dir, ts, map[string]string{"k": "v"}, 200, func(done, total int64) { last = done }); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, w := range ts {
		total += int64(len(w.Data))
	}
	if last != total {
		t.Errorf("progress ended at %d, want %d", last, total)
	}
	raw, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ParseIndex(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := idx.Metadata["total_size"]; got != float64(total) {
		t.Errorf("total_size %v, want %d", got, total)
	}
	shards := idx.Shards()
	if len(shards) < 5 || !strings.HasSuffix(shards[0], "-of-"+shards[len(shards)-1][len("model-00001-of-"):]) {
		t.Fatalf("shards %v", shards)
	}
	for _, sh := range shards {
		f, err := Open(filepath.Join(dir, sh))
		if err != nil {
			t.Fatal(err)
		}
		var size int
		for _, tn := range f.Tensors {
			size += len(tn.Data)
		}
		if size > 200 {
			t.Errorf("shard %s holds %d bytes, limit 200", sh, size)
		}
		f.Close()
	}
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Index == nil || len(s.Files) != len(shards) || len(s.Names()) != len(ts) {
		t.Fatalf("set: index %v, %d files, %d names", s.Index != nil, len(s.Files), len(s.Names()))
	}
	if !slices.IsSorted(s.Names()) {
		t.Error("names not sorted")
	}
	if s.Metadata()["k"] != "v" {
		t.Errorf("metadata %v", s.Metadata())
	}
	checkSame(t, ts, s.Tensor)
}

func TestOpenDirSingle(t *testing.T) {
	ts := []WriteTensor{{Name: "a", DType: F32, Shape: []int{1}, Data: []byte{1, 2, 3, 4}}}
	dir := t.TempDir()
	if err := WriteSharded(dir, ts, nil, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, SingleFileName)); err != nil {
		t.Fatal("one shard should be written as model.safetensors:", err)
	}
	if _, err := os.Stat(filepath.Join(dir, IndexFileName)); err == nil {
		t.Fatal("one shard should have no index")
	}
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, ts, s.Tensor)
	s.Close()
	// Any single .safetensors name works when it is the only one.
	os.Rename(filepath.Join(dir, SingleFileName), filepath.Join(dir, "consolidated.safetensors"))
	s, err = OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, ts, s.Tensor)
	s.Close()
}

func TestOpenDirErrors(t *testing.T) {
	a := []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}
	b := []WriteTensor{{Name: "b", DType: U8, Shape: []int{1}, Data: []byte{2}}}
	writeIndex := func(dir string, m map[string]string) {
		data, _ := json.Marshal(Index{WeightMap: m})
		os.WriteFile(filepath.Join(dir, IndexFileName), data, 0o644)
	}
	tests := []struct {
		name  string
		setup func(dir string)
		want  string
	}{
		{"empty dir", func(dir string) {}, "no model.safetensors.index.json"},
		{"bad index", func(dir string) { os.WriteFile(filepath.Join(dir, IndexFileName), []byte("{"), 0o644) }, IndexFileName},
		{"empty map", func(dir string) { writeIndex(dir, nil) }, "weight_map"},
		{"traversal", func(dir string) { writeIndex(dir, map[string]string{"a": "../x.safetensors"}) }, "plain file name"},
		{"missing shard", func(dir string) { writeIndex(dir, map[string]string{"a": "s1.safetensors"}) }, "s1.safetensors"},
		{"tensor not in shard", func(dir string) {
			Write(filepath.Join(dir, "s1.safetensors"), a, nil, nil)
			writeIndex(dir, map[string]string{"a": "s1.safetensors", "b": "s1.safetensors"})
		}, `tensor "b"`},
		{"wrong shard", func(dir string) {
			Write(filepath.Join(dir, "s1.safetensors"), a, nil, nil)
			Write(filepath.Join(dir, "s2.safetensors"), b, nil, nil)
			writeIndex(dir, map[string]string{"a": "s2.safetensors", "b": "s1.safetensors"})
		}, "but it is in"},
		{"duplicate", func(dir string) {
			Write(filepath.Join(dir, "s1.safetensors"), a, nil, nil)
			Write(filepath.Join(dir, "s2.safetensors"), a, nil, nil)
			writeIndex(dir, map[string]string{"a": "s1.safetensors", "x": "s2.safetensors"})
		}, "in both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(dir)
			_, err := OpenDir(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
