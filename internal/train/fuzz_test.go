package train

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// FuzzParseConfig feeds arbitrary JSON to the student config parser: it must return an
// error or a config, never panic, and a config that validates must build a model.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"dim":16,"layers":2,"heads":4,"kv_heads":2,"hidden":32,"ctx":8}`))
	f.Add([]byte(`{"dim":16,"layers":1,"heads":2,"kv_heads":1,"hidden":8,"ctx":4,"tied":false,"rope_theta":500000}`))
	f.Add([]byte(`{"dim":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfigBytes(b)
		if err != nil {
			return
		}
		c.Vocab = 7
		if c.Validate() != nil || c.Dim*c.Layers*c.Hidden > 1<<14 || c.Dim*c.Dim*c.Layers > 1<<14 {
			return
		}
		if _, err := NewModel(c, 1); err != nil {
			t.Fatalf("config %+v validates but builds no model: %v", c, err)
		}
	})
}

// FuzzLoadFiles feeds arbitrary bytes as a top-k cache and as a checkpoint: errors, never
// a panic or an allocation beyond what the file's size allows.
func FuzzLoadFiles(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed")
	if err := SaveTopK(seed, "k", TopK{K: 2, IDs: []int32{1, 0}, Logits: []float32{1, 0}}); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(seed)
	f.Add(b)
	p := cpu.NewPool(1)
	defer p.Close()
	c := tinyConfig(20)
	c.Layers = 1
	m, _ := NewModel(c, 1)
	tr, err := NewTrainer(m, patternData(c.Vocab, 2, c.Ctx), trainOptions(2, 1), p)
	if err != nil {
		f.Fatal(err)
	}
	if err := tr.SaveCheckpoint(seed); err != nil {
		f.Fatal(err)
	}
	b, _ = os.ReadFile(seed)
	f.Add(b[:200])
	f.Add([]byte("KVTOPK01\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		LoadTopK(path, "k")
		tr.LoadCheckpoint(path)
	})
}
