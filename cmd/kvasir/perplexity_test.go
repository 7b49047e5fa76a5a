package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// llamaCppStoriesPPL is llama.cpp's llama-perplexity on stories260K.gguf over
// tinystories_excerpt.txt with -c 128 -b 128 --chunks 40 (build c392e50, CPU): the
// external oracle kvasir perplexity is held to.
const llamaCppStoriesPPL = 4.4156

// llamaCppStridedPPL is the same with --ppl-stride 64 (windows of 128+32 tokens).
const llamaCppStridedPPL = 4.1689

// TestPerplexityMatchesLlamaCpp runs kvasir perplexity as llama-perplexity was run and
// checks the estimate within 0.1%, and the JSON output's fields.
func TestPerplexityMatchesLlamaCpp(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	text := testdata.Path(t, "corpus/tinystories_excerpt.txt")
	stdout, _ := runWithIO(t, "", func() error {
		return runPerplexity([]string{"-m", model, "-f", text, "--ctx", "128", "--chunks", "40", "--threads", "2", "--json", "--kl-base", model})
	})
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
	}
	ppl, _ := got["perplexity"].(float64)
	if math.Abs(ppl/llamaCppStoriesPPL-1) > 0.001 {
		t.Errorf("perplexity %v, llama.cpp %v", ppl, llamaCppStoriesPPL)
	}
	// 40 windows of 128 tokens, positions 64..126 of each scored.
	if got["tokens"] != float64(40*63) || got["ctx"] != float64(128) {
		t.Errorf("tokens %v ctx %v, want %d and 128", got["tokens"], got["ctx"], 40*63)
	}
	// Against itself: no divergence, full agreement.
	if kl, _ := got["kl_divergence"].(float64); math.Abs(kl) > 1e-9 || got["top1_agreement"] != float64(1) {
		t.Errorf("against itself: kl_divergence %v top1_agreement %v", got["kl_divergence"], got["top1_agreement"])
	}
	stdout, _ = runWithIO(t, "", func() error {
		return runPerplexity([]string{"-m", model, "-f", text, "--ctx", "128", "--stride", "64", "--chunks", "40", "--threads", "2", "--json"})
	})
	got = nil
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
	}
	if ppl, _ := got["perplexity"].(float64); math.Abs(ppl/llamaCppStridedPPL-1) > 0.001 || got["ctx"] != float64(160) || got["tokens"] != float64(40*64) {
		t.Errorf("strided: perplexity %v ctx %v tokens %v, llama.cpp %v over windows of 160, %d tokens", ppl, got["ctx"], got["tokens"], llamaCppStridedPPL, 40*64)
	}
	stdout, _ = runWithIO(t, "", func() error {
		return runPerplexity([]string{"-m", model, "-f", text, "--ctx", "128", "--chunks", "2", "--threads", "2"})
	})
	if !strings.Contains(stdout, "[1]") || !strings.Contains(stdout, "Final estimate: PPL = ") {
		t.Errorf("text output lacks the per-window progress or the final estimate:\n%s", stdout)
	}
}

// TestPerplexityKVCacheDType: --kl-base-kv-cache-dtype gives the reference model its own
// cache type, so the same model with an int8 cache against an f32 one shows what the
// quantization moved (a divergence above zero, agreement below one, a perplexity within
// 1% on stories260K), and a bad name is refused naming the flag.
func TestPerplexityKVCacheDType(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	text := testdata.Path(t, "corpus/tinystories_excerpt.txt")
	run := func(dt string) map[string]any {
		stdout, _ := runWithIO(t, "", func() error {
			return runPerplexity([]string{"-m", model, "-f", text, "--ctx", "128", "--chunks", "20", "--threads", "2", "--json",
				"--kv-cache-dtype", dt, "--kl-base", model, "--kl-base-kv-cache-dtype", "f32"})
		})
		var got map[string]any
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
		}
		return got
	}
	f32, q := run("f32"), run("int8")
	if kl, _ := f32["kl_divergence"].(float64); math.Abs(kl) > 1e-9 || f32["top1_agreement"] != float64(1) {
		t.Errorf("f32 against f32: kl_divergence %v top1_agreement %v", f32["kl_divergence"], f32["top1_agreement"])
	}
	kl, _ := q["kl_divergence"].(float64)
	agree, _ := q["top1_agreement"].(float64)
	p0, _ := f32["perplexity"].(float64)
	p1, _ := q["perplexity"].(float64)
	if kl <= 0 || agree >= 1 || agree < 0.9 || math.Abs(p1/p0-1) > 0.01 {
		t.Errorf("int8 against f32: kl_divergence %v, top1_agreement %v, perplexity %v against %v", kl, agree, p1, p0)
	}
	err := runPerplexity([]string{"-m", model, "-f", text, "--kl-base", model, "--kl-base-kv-cache-dtype", "fp4"})
	if err == nil || !strings.Contains(err.Error(), "kv-cache-dtype") {
		t.Errorf("a bad --kl-base-kv-cache-dtype: %v", err)
	}
}
