//go:build linux

package abuse

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// The hostile inputs are written at run time from the shared test models: small files
// (about a megabyte) whose header or template asks for what no server can give.

// ggufModel is the model the suite serves: TinyStories-656K (Q8_0, 512-token context), fast
// enough on two cores that an ordinary request takes milliseconds.
func ggufModel(t *testing.T) string {
	return testdata.Path(t, "models/tinystories-656k-gguf/TinyStories-656K-Q8_0.gguf")
}

// trapModel is ggufModel with trapTemplate as its chat template, written into t's temporary
// folder: the model every server of the suite serves.
func trapModel(t *testing.T) string {
	return writeGGUF(t, ggufModel(t), "trap-template.gguf", map[string]gguf.Value{
		"tokenizer.chat_template": gguf.String(trapTemplate),
	})
}

// hfModel is the same model as a Hugging Face folder.
func hfModel(t *testing.T) string {
	return testdata.Path(t, "models/tinystories-656k")
}

// Triggers of trapTemplate: a user message with one of these contents makes it misbehave.
const (
	triggerRecursion = "recurse for ever"
	triggerRepeat    = "repeat a billion times"
	triggerRange     = "loop a hundred million times"
)

// trapTemplate renders ordinary conversations ("role: content" lines, then "assistant:"),
// but recurses without end, builds a 1 GB string or loops 1e8 times when a message holds
// one of the triggers: a template that passes any check at load and turns on the server
// at a request.
const trapTemplate = `{%- macro deeper(n) -%}{{ deeper(n + 1) }}{%- endmacro -%}
{%- for m in messages -%}
{%- if m.content == '` + triggerRecursion + `' -%}{{ deeper(0) }}
{%- elif m.content == '` + triggerRepeat + `' -%}{{ 'a' * 1000000000 }}
{%- elif m.content == '` + triggerRange + `' -%}{% for i in range(100000000) %}{% endfor %}
{%- else -%}{{ m.role }}: {{ m.content }}
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}assistant:{% endif -%}`

// hostileTemplates misbehave on every conversation, so a server must refuse them at load.
var hostileTemplates = map[string]string{
	"recursion": `{%- macro deeper(n) -%}{{ deeper(n + 1) }}{%- endmacro -%}{{ deeper(0) }}`,
	"repeat":    `{{ 'a' * 1000000000 }}`,
	"range":     `{% for i in range(100000000) %}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}`,
}

// writeGGUF writes a copy of the GGUF file src into t's temporary folder as name, with the
// metadata keys of set replaced or added, and returns its path.
func writeGGUF(t *testing.T, src, name string, set map[string]gguf.Value) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kvs []gguf.KV
	done := map[string]bool{}
	for _, kv := range f.KV {
		if v, ok := set[kv.Key]; ok {
			kv.Value, done[kv.Key] = v, true
		}
		kvs = append(kvs, kv)
	}
	for k, v := range set {
		if !done[k] {
			kvs = append(kvs, gguf.KV{Key: k, Value: v})
		}
	}
	var tensors []gguf.WriterTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, gguf.WriterTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: data})
	}
	path := filepath.Join(t.TempDir(), name)
	if err := gguf.WriteFile(path, kvs, tensors, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeHFFolder makes a Hugging Face folder in t's temporary folder from the folder src:
// config.json with the keys of set replaced, the other files linked. It returns its path.
func writeHFFolder(t *testing.T, src string, set map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "config.json" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s/config.json: %v", src, err)
	}
	for k, v := range set {
		cfg[k] = v
	}
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeFile writes content to name in t's temporary folder and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// jsonArray is a JSON array of count elements, element i being elem(i).
func jsonArray(count int, elem func(i int) string) string {
	parts := make([]string, count)
	for i := range parts {
		parts[i] = elem(i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// stopStrings is the stop field of the table's first case: count distinct six-letter
// strings (about 9.4 MiB for 1.1 M).
func stopStrings(count int) string {
	return jsonArray(count, func(i int) string { return fmt.Sprintf(`"%06x"`, i) })
}

// manyMessages is a messages array of count one-letter user messages (8.6 MiB for 300 k).
func manyMessages(count int) string {
	return jsonArray(count, func(int) string { return `{"role":"user","content":"x"}` })
}

// manyPrompts is a prompt array of count short prompts.
func manyPrompts(count int) string {
	return jsonArray(count, func(i int) string { return fmt.Sprintf(`"Once upon a time %d"`, i) })
}
