package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestSynthMixedPreset: --dtype q4_k_m gives the matrices the types kvasir quantize's
// Q4_K_M gives them (Q6_K for the output projection and for the value and down projections
// of the layers llama.cpp picks), and a single type stays that type throughout.
func TestSynthMixedPreset(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
		"intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dtype string
		want  map[string]quant.Type
	}{
		{"q4_k_m", map[string]quant.Type{"output.weight": quant.Q6_K, "token_embd.weight": quant.Q4_K, "blk.0.attn_v.weight": quant.Q4_K,
			"blk.1.attn_v.weight": quant.Q6_K, "blk.1.ffn_down.weight": quant.Q6_K, "blk.1.attn_q.weight": quant.Q4_K, "blk.1.attn_norm.weight": quant.F32}},
		{"q4_k", map[string]quant.Type{"output.weight": quant.Q4_K, "blk.1.attn_v.weight": quant.Q4_K, "blk.1.ffn_down.weight": quant.Q4_K}},
	} {
		path := filepath.Join(dir, c.dtype+".gguf")
		if err := runSynth([]string{"--config", cfg, "--dtype", c.dtype, "--quiet", "-o", path}); err != nil {
			t.Fatalf("synth --dtype %s: %v", c.dtype, err)
		}
		m, err := format.Open(path, format.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range c.want {
			if tt, ok := m.Tensor(name); !ok {
				t.Errorf("--dtype %s: no tensor %s", c.dtype, name)
			} else if tt.Type != want {
				t.Errorf("--dtype %s: %s is %s, want %s", c.dtype, name, tt.Type, want)
			}
		}
		m.Close()
	}
	if err := runSynth([]string{"--config", cfg, "--dtype", "q4_k_m", "--quiet", "-o", filepath.Join(dir, "hf")}); err == nil {
		t.Error("a mixed preset was written to a Hugging Face folder")
	}
	if err := runSynth([]string{"--config", cfg, "--dtype", "q4_k_x", "--quiet", "-o", filepath.Join(dir, "x.gguf")}); err == nil {
		t.Error("an unknown type was accepted")
	}
}
