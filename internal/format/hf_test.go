package format

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

const tinyStoriesDir = "models/tinystories-656k"

// TestOpenTiedHeadOnly: TinyStories-656K's folder stores its tied embeddings only as
// lm_head.weight. It opens with that matrix as token_embd.weight (serving as the output
// too), and converts to a GGUF that has token_embd.weight and no output.weight: the
// tensors of llama.cpp's own conversion of the folder.
func TestOpenTiedHeadOnly(t *testing.T) {
	dir := testdata.Path(t, tinyStoriesDir)
	m := openT(t, dir, Options{})
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, ok := set.Tensor("model.embed_tokens.weight"); ok {
		t.Fatal("the fixture has changed: it stores model.embed_tokens.weight")
	}
	head, ok := set.Tensor("lm_head.weight")
	if !ok {
		t.Fatal("the fixture has changed: it stores no lm_head.weight")
	}
	emb, ok := m.Tensor("token_embd.weight")
	if !ok {
		t.Fatal("no token_embd.weight")
	}
	if !slices.Equal(emb.Shape, []int{2048, 128}) || !bytes.Equal(emb.Data, head.Data) {
		t.Errorf("token_embd.weight %v is not lm_head.weight's %v", emb.Shape, head.Shape)
	}
	if _, ok := m.Tensor("output.weight"); ok || !m.Config.TiedEmbeddings {
		t.Errorf("output.weight present %v, tied %v: want the one matrix, tied", ok, m.Config.TiedEmbeddings)
	}

	out := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := Convert(m, out, ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	for _, ti := range f.Tensors {
		names = append(names, ti.Name)
	}
	if !slices.Contains(names, "token_embd.weight") || slices.Contains(names, "output.weight") {
		t.Errorf("the GGUF holds %v: want token_embd.weight and no output.weight", names)
	}
	// llama.cpp's own conversion of the folder has the same tensors, of the same shapes.
	ref, err := gguf.Open(testdata.Path(t, "models/tinystories-656k-gguf/TinyStories-656K-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if len(ref.Tensors) != len(f.Tensors) {
		t.Errorf("llama.cpp's GGUF has %d tensors, ours %d", len(ref.Tensors), len(f.Tensors))
	}
	for _, rt := range ref.Tensors {
		if ti, ok := f.Tensor(rt.Name); !ok || !slices.Equal(ti.Dims, rt.Dims) {
			t.Errorf("tensor %s: llama.cpp's GGUF has dims %v, ours %v", rt.Name, rt.Dims, ti)
		}
	}
	sameTensors(t, m, openT(t, out, Options{}))
}

// TestOpenHFEmbeddingMissing: a folder with neither embedding tensor, or with lm_head.weight
// alone but untied, is refused with the tensor's Hugging Face name.
func TestOpenHFEmbeddingMissing(t *testing.T) {
	src := testdata.Path(t, tinyStoriesDir)
	set, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	cfgJSON, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	// folder writes a copy of the fixture with tie_word_embeddings set to tied and without
	// the tensor named drop.
	folder := func(tied bool, drop string) string {
		dir := t.TempDir()
		var cfg map[string]any
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["tie_word_embeddings"] = tied
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.WriteTensor
		for _, name := range set.Names() {
			if name != drop {
				ti, _ := set.Tensor(name)
				ts = append(ts, safetensors.WriteTensor{Name: name, DType: ti.DType, Shape: ti.Shape, Data: ti.Data})
			}
		}
		if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFileName), ts, nil, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		name, dir, want string
	}{
		{"neither", folder(true, "lm_head.weight"), "tensor model.embed_tokens.weight is missing, and there is no lm_head.weight"},
		{"untied head", folder(false, ""), "lm_head.weight stands for it only with tie_word_embeddings: true"},
	}
	for _, c := range cases {
		m, err := Open(c.dir, Options{})
		if err == nil {
			m.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	m := openT(t, folder(true, ""), Options{}) // the fixture itself, rewritten, still opens
	if _, ok := m.Tensor("token_embd.weight"); !ok {
		t.Error("the rewritten fixture has no token_embd.weight")
	}
}
