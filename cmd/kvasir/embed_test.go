package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestSynthEncoderShapes writes the encoder shapes as GGUF and HF folders; serve tells
// them from generative models, and an Embedder opens them.
func TestSynthEncoderShapes(t *testing.T) {
	dir := t.TempDir()
	for _, out := range []string{"bert-tiny.gguf", "bert-tiny", "bert-tiny-reranker"} {
		shape := strings.TrimSuffix(out, ".gguf")
		path := filepath.Join(dir, out)
		if err := runSynth([]string{"--shape", shape, "--seed", "1", "-o", path}); err != nil {
			t.Fatalf("synth %s: %v", out, err)
		}
		if p, ok := embedderPath(path, ""); !ok || p != path {
			t.Errorf("%s: embedderPath %q %v", out, p, ok)
		}
		e, err := kvasir.OpenEmbedder(path, kvasir.EmbedderOptions{Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if e.HasClassifier() != strings.HasSuffix(shape, "reranker") || e.Pooling() != "cls" || e.Dim() != 128 {
			t.Errorf("%s: classifier %v, pooling %s, dim %d", out, e.HasClassifier(), e.Pooling(), e.Dim())
		}
		e.Close()
		out := captureStdout(t, func() error { return runInspect([]string{"--json", path}) })
		var in encoderInspection
		if err := json.Unmarshal([]byte(out), &in); err != nil || in.Architecture != "bert" || in.Pooling != "cls" || in.Tokenizer != "wordpiece" || in.Parameters == 0 {
			t.Errorf("%s: inspect --json %+v (%v): %s", out, in, err, out)
		}
	}
	if err := runSynth([]string{"--shape", "bert-tiny", "-o", filepath.Join(dir, "bert-tiny")}); err == nil {
		t.Error("synth over an existing folder succeeded")
	}
	if _, ok := embedderPath("synth:smollm2-135m", "last"); ok {
		t.Error("a synth: decoder is an encoder")
	}
	if err := runServe([]string{"-m", "synth:smollm2-135m:q8_0", "--pooling", "mean", "--port", "0"}); err == nil || !strings.Contains(err.Error(), "not an embedding model") {
		t.Errorf("--pooling with a generative model: %v", err)
	}
}

// TestDecoderEmbedderPath: a decoder GGUF is served as an embedding model when --pooling
// is given, and generates text otherwise.
func TestDecoderEmbedderPath(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
		"intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
		"vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "qwen2.gguf")
	if err := runSynth([]string{"--config", cfg, "--dtype", "f32", "--quiet", "-o", path}); err != nil {
		t.Fatal(err)
	}
	if _, ok := embedderPath(path, ""); ok {
		t.Error("a decoder without pooling metadata is served as an embedding model")
	}
	if p, ok := embedderPath(path, "last"); !ok || p != path {
		t.Errorf("a decoder with --pooling last: embedderPath %q %v", p, ok)
	}
}

func TestBenchEmbed(t *testing.T) {
	out := captureStdout(t, func() error {
		return benchEmbed([]string{"--shape", "bert-tiny", "--num-inputs", "3", "--input-len", "5", "--threads", "1", "--json"})
	})
	var r embedBenchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Inputs != 3 || r.InputLen != 5 || r.Batched <= 0 || r.Single <= 0 || r.Speedup <= 0 {
		t.Errorf("bench embed --json: %+v (%v): %s", r, err, out)
	}
	for _, args := range [][]string{{}, {"--shape", "nope"}, {"--shape", "bert-tiny", "--input-len", "1"}, {"--shape", "bert-tiny", "--input-len", "9999"}} {
		if err := benchEmbed(args); err == nil {
			t.Errorf("bench embed %v succeeded", args)
		}
	}
}

// TestBenchEmbedSharedPrefix: bench embed --shared-prefix on a decoder reports a rate
// with prefix caching off and on for each pair and their ratio; an encoder, which has no
// KV cache, and a prefix as long as the input are refused.
func TestBenchEmbedSharedPrefix(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
		"intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
		"vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "qwen2.gguf")
	if err := runSynth([]string{"--config", cfg, "--dtype", "f32", "--quiet", "-o", path}); err != nil {
		t.Fatal(err)
	}
	out := captureStdout(t, func() error {
		return benchEmbed([]string{"-m", path, "--pooling", "last", "--num-inputs", "4", "--input-len", "40", "--shared-prefix", "32", "--repeats", "2", "--threads", "1", "--json"})
	})
	var r embedPrefixResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Inputs != 4 || r.SharedPrefix != 32 || r.Pooling != "last" || len(r.Off) != 2 || len(r.On) != 2 || r.Speedup <= 0 {
		t.Errorf("bench embed --shared-prefix --json: %+v (%v): %s", r, err, out)
	}
	for _, args := range [][]string{
		{"--shape", "bert-tiny", "--input-len", "8", "--shared-prefix", "4"},
		{"-m", path, "--pooling", "last", "--input-len", "8", "--shared-prefix", "8"},
	} {
		if err := benchEmbed(args); err == nil {
			t.Errorf("bench embed %v succeeded", args)
		}
	}
}
