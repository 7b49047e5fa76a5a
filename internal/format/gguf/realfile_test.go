package gguf

import (
	"bytes"
	"math"
	"os"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// rewrite encodes a parsed file again with Writer: metadata and tensors in file order.
func rewrite(t testing.TB, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, f.Version)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range f.KV {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(WriterTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRealModels(t *testing.T) {
	cases := []struct {
		path    string
		arch    string
		tensors int
		types   map[string]quant.Type // a few tensors' expected types
		uints   map[string]uint64
		vocab   int
	}{
		{"models/stories260K/stories260K.gguf", "llama", 48,
			map[string]quant.Type{"token_embd.weight": quant.F32, "blk.0.attn_q.weight": quant.F32},
			map[string]uint64{"llama.embedding_length": 64, "llama.block_count": 5, "llama.feed_forward_length": 172,
				"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4, "llama.context_length": 128}, 512},
		{"models/stories260K/stories260K-F16.gguf", "llama", 48,
			map[string]quant.Type{"blk.0.attn_q.weight": quant.F16, "blk.0.attn_norm.weight": quant.F32},
			map[string]uint64{"llama.embedding_length": 64, "llama.block_count": 5}, 512},
		{"models/stories260K/stories260K-Q8_0.gguf", "llama", 48,
			map[string]quant.Type{"blk.0.attn_q.weight": quant.Q8_0, "blk.0.ffn_down.weight": quant.F16},
			map[string]uint64{"llama.embedding_length": 64, "llama.block_count": 5}, 512},
		{"models/stories260K/stories260K-Q4_0.gguf", "llama", 48,
			map[string]quant.Type{"blk.0.attn_q.weight": quant.Q4_0, "blk.0.ffn_down.weight": quant.F16},
			map[string]uint64{"llama.embedding_length": 64, "llama.block_count": 5}, 512},
		{"models/tiny-random/llama-2-tiny-random.gguf", "llama", 12,
			map[string]quant.Type{"blk.0.attn_q.weight": quant.F16},
			map[string]uint64{"llama.embedding_length": 8, "llama.block_count": 1}, 32000},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			f, err := Open(testdata.Path(t, c.path))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Version != 3 || f.Alignment != 32 {
				t.Errorf("version %d alignment %d, want 3 and 32", f.Version, f.Alignment)
			}
			if got := f.Architecture(); got != c.arch {
				t.Errorf("architecture %q, want %q", got, c.arch)
			}
			if len(f.Tensors) != c.tensors {
				t.Errorf("%d tensors, want %d", len(f.Tensors), c.tensors)
			}
			for key, want := range c.uints {
				if got, ok := f.GetUint64(key); !ok || got != want {
					t.Errorf("%s = %d (%v), want %d", key, got, ok, want)
				}
			}
			for name, want := range c.types {
				ti, ok := f.Tensor(name)
				if !ok {
					t.Errorf("tensor %s missing", name)
				} else if ti.Type != want {
					t.Errorf("tensor %s has type %s, want %s", name, ti.Type, want)
				}
			}
			checkVocab(t, f, c.vocab)
			if eps, ok := f.GetFloat64("llama.attention.layer_norm_rms_epsilon"); !ok || math.Abs(eps-1e-5) > 1e-12 {
				t.Errorf("rms epsilon %g (%v), want 1e-5", eps, ok)
			}
			if bos, ok := f.GetInt64("tokenizer.ggml.bos_token_id"); !ok || bos != 1 {
				t.Errorf("bos_token_id %d (%v), want 1", bos, ok)
			}
			dim, _ := f.GetUint64("llama.embedding_length")
			if emb, ok := f.Tensor("token_embd.weight"); !ok {
				t.Error("token_embd.weight missing")
			} else if n, _ := emb.Elements(); !equalDims(emb.Dims, []uint64{dim, uint64(c.vocab)}) || n != dim*uint64(c.vocab) {
				t.Errorf("token_embd.weight: %+v", emb)
			}
			var total uint64
			for i := range f.Tensors {
				ti := &f.Tensors[i]
				data, err := f.TensorData(ti)
				if err != nil {
					t.Fatalf("tensor %s: %v", ti.Name, err)
				}
				size, _ := ti.Size()
				if uint64(len(data)) != size || cap(data) != len(data) {
					t.Errorf("tensor %s: %d bytes (cap %d), want %d", ti.Name, len(data), cap(data), size)
				}
				total += size
			}
			if total == 0 || int64(total) > f.Size-f.DataOffset {
				t.Errorf("tensor bytes %d do not fit the data section of %d bytes", total, f.Size-f.DataOffset)
			}
			// The writer lays the same content out exactly as llama.cpp's tools did.
			orig, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if got := rewrite(t, f); !bytes.Equal(got, orig) {
				t.Errorf("rewritten file differs from the original (%d vs %d bytes)", len(got), len(orig))
			}
		})
	}
}

// checkVocab checks the tokenizer arrays agree in length and read through the accessors.
func checkVocab(t *testing.T, f *File, n int) {
	t.Helper()
	tokens, ok := f.GetStrings("tokenizer.ggml.tokens")
	if !ok || len(tokens) != n {
		t.Fatalf("tokenizer.ggml.tokens: %d strings (%v), want %d", len(tokens), ok, n)
	}
	if scores, ok := f.GetFloat32s("tokenizer.ggml.scores"); ok && len(scores) != n {
		t.Errorf("tokenizer.ggml.scores: %d, want %d", len(scores), n)
	}
	if types, ok := f.GetInt32s("tokenizer.ggml.token_type"); ok && len(types) != n {
		t.Errorf("tokenizer.ggml.token_type: %d, want %d", len(types), n)
	}
}

func TestRealVocabs(t *testing.T) {
	cases := []struct {
		name  string
		model string // tokenizer.ggml.model
		vocab int
	}{
		{"llama-spm", "llama", 32000},
		{"phi-3", "llama", 32064},
		{"gpt-2", "gpt2", 50257},
		{"deepseek-llm", "gpt2", 102400},
		{"bert-bge", "bert", 30522},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Open(testdata.Path(t, "tokenizers/vocab/ggml-vocab-"+c.name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors) != 0 {
				t.Errorf("%d tensors, want none", len(f.Tensors))
			}
			if f.Architecture() == "" {
				t.Error("no general.architecture")
			}
			if got, _ := f.GetString("tokenizer.ggml.model"); got != c.model {
				t.Errorf("tokenizer.ggml.model %q, want %q", got, c.model)
			}
			checkVocab(t, f, c.vocab)
			if c.name == "bert-bge" {
				if causal, ok := f.GetBool("bert.attention.causal"); !ok || causal {
					t.Errorf("bert.attention.causal = %v (%v), want false", causal, ok)
				}
			}
			orig, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if got := rewrite(t, f); !bytes.Equal(got, orig) {
				t.Errorf("rewritten file differs from the original (%d vs %d bytes)", len(got), len(orig))
			}
		})
	}
}
