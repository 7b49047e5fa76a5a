package hub

import (
	"errors"
	"slices"
	"testing"
)

func TestSelectFiles(t *testing.T) {
	cases := []struct {
		name   string
		file   string
		names  []string
		files  []string
		target string
		index  string
		err    error
	}{
		{
			name:   "one gguf among other files",
			names:  []string{"README.md", "model.gguf", "LICENSE", ".gitattributes"},
			files:  []string{"model.gguf"},
			target: "model.gguf",
		},
		{
			name:   "gguf with a projector",
			names:  []string{"model-Q8_0.gguf", "mmproj-model-f16.gguf"},
			files:  []string{"model-Q8_0.gguf"},
			target: "model-Q8_0.gguf",
		},
		{
			name:   "one split gguf",
			names:  []string{"m-00002-of-00002.gguf", "m-00001-of-00002.gguf"},
			files:  []string{"m-00001-of-00002.gguf", "m-00002-of-00002.gguf"},
			target: "m-00001-of-00002.gguf",
		},
		{
			name:   "split part named",
			file:   "m-00002-of-00002.gguf",
			names:  []string{"m-00002-of-00002.gguf", "m-00001-of-00002.gguf"},
			files:  []string{"m-00001-of-00002.gguf", "m-00002-of-00002.gguf"},
			target: "m-00001-of-00002.gguf",
		},
		{
			name:  "split part missing",
			file:  "m-00001-of-00003.gguf",
			names: []string{"m-00001-of-00003.gguf", "m-00003-of-00003.gguf"},
			err:   ErrNotFound,
		},
		{
			name:  "several gguf",
			names: []string{"a.gguf", "b.gguf"},
			err:   ErrChoice,
		},
		{
			name:   "several gguf, one named",
			file:   "b.gguf",
			names:  []string{"a.gguf", "b.gguf"},
			files:  []string{"b.gguf"},
			target: "b.gguf",
		},
		{
			name:  "named file missing",
			file:  "c.gguf",
			names: []string{"a.gguf", "b.gguf"},
			err:   ErrNotFound,
		},
		{
			name:  "no model files",
			names: []string{"README.md", "pytorch_model.bin"},
			err:   ErrNotFound,
		},
		{
			name: "safetensors beats gguf and skips other formats",
			names: []string{"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
				"generation_config.json", "chat_template.jinja", "model.gguf", "pytorch_model.bin",
				"onnx/model.onnx", "sub/extra.safetensors", "vocab.txt", "README.md"},
			files: []string{"chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
				"tokenizer.json", "tokenizer_config.json"},
		},
		{
			name:  "a sentence-transformers encoder brings its pooling",
			names: []string{"model.safetensors", "config.json", "tokenizer.json", "1_Pooling/config.json", "modules.json", "onnx/model.onnx"},
			files: []string{"1_Pooling/config.json", "config.json", "model.safetensors", "tokenizer.json"},
		},
		{
			name:  "sharded safetensors with index",
			names: []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", safetensorsIndex, "config.json"},
			files: []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", safetensorsIndex},
			index: safetensorsIndex,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel, err := selectFiles(Ref{Repo: "o/r", File: c.file}, c.names)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sel.files, c.files) || sel.target != c.target || sel.index != c.index {
				t.Errorf("got files %v target %q index %q, want %v %q %q", sel.files, sel.target, sel.index, c.files, c.target, c.index)
			}
		})
	}
}

func TestApplyIndex(t *testing.T) {
	have := map[string]bool{"a.safetensors": true, "b.safetensors": true, "consolidated.safetensors": true, "config.json": true}
	sel := selection{files: []string{"a.safetensors", "b.safetensors", "config.json", "consolidated.safetensors"}, index: safetensorsIndex}
	got, err := applyIndex(Ref{Repo: "o/r"}, sel, []byte(`{"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"a.safetensors"}}`), have)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.safetensors", "b.safetensors", "config.json"}; !slices.Equal(got.files, want) {
		t.Errorf("files %v, want %v", got.files, want)
	}
	if _, err := applyIndex(Ref{Repo: "o/r"}, sel, []byte(`{"weight_map":{"x":"gone.safetensors"}}`), have); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing shard: err = %v", err)
	}
	if _, err := applyIndex(Ref{Repo: "o/r"}, sel, []byte(`{"weight_map":{"x":"../../evil"}}`), have); err == nil {
		t.Error("unsafe shard name accepted")
	}
	if _, err := applyIndex(Ref{Repo: "o/r"}, sel, []byte(`not json`), have); err == nil {
		t.Error("bad JSON accepted")
	}
}

// FuzzSelectFiles checks that selection never panics and only picks listed files.
func FuzzSelectFiles(f *testing.F) {
	f.Add("a.gguf\nb.gguf", "")
	f.Add("m-00001-of-00002.gguf\nm-00002-of-00002.gguf", "m-00002-of-00002.gguf")
	f.Add("model.safetensors\nconfig.json", "")
	f.Add("x-00001-of-00000.gguf", "x-00001-of-00000.gguf")
	f.Fuzz(func(t *testing.T, list, file string) {
		names := slices.DeleteFunc(splitLines(list), func(s string) bool { return checkFilePath(s) != nil })
		sel, err := selectFiles(Ref{Repo: "o/r", File: file}, names)
		if err != nil {
			return
		}
		for _, n := range sel.files {
			if !slices.Contains(names, n) {
				t.Fatalf("selected %q not in %q", n, names)
			}
		}
		if sel.target != "" && !slices.Contains(sel.files, sel.target) {
			t.Fatalf("target %q not among %q", sel.target, sel.files)
		}
	})
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
