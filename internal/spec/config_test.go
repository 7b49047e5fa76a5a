package spec

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/engine"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		json string
		want Config
	}{
		{`{"method": "ngram", "num_speculative_tokens": 4}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 4, PromptLookupMin: 5, PromptLookupMax: 5}},
		{`{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 3, PromptLookupMin: 4, PromptLookupMax: 4}},
		{`{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 3, PromptLookupMin: 2, PromptLookupMax: 2}},
		{`{"method": "ngram", "num_speculative_tokens": 16, "prompt_lookup_min": 1, "prompt_lookup_max": 7, "dynamic": false}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 16, PromptLookupMin: 1, PromptLookupMax: 7, DisableDynamic: true}},
		// vLLM's legacy spellings of ngram.
		{`{"method": "[ngram]", "num_speculative_tokens": 2}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 2, PromptLookupMin: 5, PromptLookupMax: 5}},
		{`{"model": "[ngram]", "num_speculative_tokens": 2}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 2, PromptLookupMin: 5, PromptLookupMax: 5}},
		{`{"model": "ngram", "method": "ngram", "num_speculative_tokens": 2}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 2, PromptLookupMin: 5, PromptLookupMax: 5}},
		// Only a prompt lookup length: ngram.
		{`{"num_speculative_tokens": 2, "prompt_lookup_max": 3}`,
			Config{Method: MethodNGram, NumSpeculativeTokens: 2, PromptLookupMin: 3, PromptLookupMax: 3}},
		{`{"method": "draft_model", "model": "draft.gguf", "num_speculative_tokens": 5}`,
			Config{Method: MethodDraftModel, Model: "draft.gguf", NumSpeculativeTokens: 5}},
		// vLLM infers draft_model from a model alone.
		{`{"model": "hf:Qwen/Qwen3-0.6B", "num_speculative_tokens": 4, "dynamic": true}`,
			Config{Method: MethodDraftModel, Model: "hf:Qwen/Qwen3-0.6B", NumSpeculativeTokens: 4}},
		{`{"method": "layer_skip", "draft_layers": 3, "num_speculative_tokens": 1}`,
			Config{Method: MethodLayerSkip, DraftLayers: 3, NumSpeculativeTokens: 1}},
		{`{"draft_layers": 2, "num_speculative_tokens": 1, "dynamic": null}`,
			Config{Method: MethodLayerSkip, DraftLayers: 2, NumSpeculativeTokens: 1}},
		{"  {\"method\":\"ngram\",\"num_speculative_tokens\":1}\n",
			Config{Method: MethodNGram, NumSpeculativeTokens: 1, PromptLookupMin: 5, PromptLookupMax: 5}},
	} {
		got, err := Parse([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if *got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.json, *got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{``, "want a JSON object"},
		{`[]`, `want a JSON object, not "["`},
		{`null`, "want a JSON object, not null"},
		{`"ngram"`, "want a JSON object"},
		{`{"method": "ngram", "num_speculative_tokens": 4`, "unexpected EOF"},
		{`{"method": "ngram", "num_speculative_tokens": 4} {}`, "found more after it"},
		{`{"method": "ngram"}`, "num_speculative_tokens is missing: want 1..16"},
		{`{"method": "ngram", "num_speculative_tokens": 0}`, "num_speculative_tokens 0: want 1..16"},
		{`{"method": "ngram", "num_speculative_tokens": -3}`, "num_speculative_tokens -3: want 1..16"},
		{`{"method": "ngram", "num_speculative_tokens": 17}`, "num_speculative_tokens 17: want 1..16"},
		{`{"method": "ngram", "num_speculative_tokens": 2.5}`, `key "num_speculative_tokens": want a whole number, not a JSON number 2.5`},
		{`{"method": "ngram", "num_speculative_tokens": "4"}`, `key "num_speculative_tokens": want a whole number, not a JSON string`},
		{`{"method": 7, "num_speculative_tokens": 4}`, `key "method": want a string`},
		{`{"method": "ngram", "num_speculative_tokens": 4, "dynamic": "no"}`, `key "dynamic": want true or false`},
		{`{"method": "eagle", "model": "x", "num_speculative_tokens": 4}`, `method "eagle" is vLLM's but kvasir does not run it`},
		{`{"method": "magic", "num_speculative_tokens": 4}`, `unknown method "magic": want ngram, draft_model or layer_skip`},
		{`{"method": "", "num_speculative_tokens": 4}`, "method is empty"},
		{`{"method": "NGRAM", "num_speculative_tokens": 4}`, `unknown method "NGRAM"`},
		{`{"num_speculative_tokens": 4}`, "no method: give method"},
		{`{"num_speculative_tokens": 4, "model": "d.gguf", "draft_layers": 2}`, "fields of several (draft_model and layer_skip)"},
		{`{"method": "ngram", "num_speculative_tokens": 4, "speculative_model": "x"}`, `unknown key "speculative_model" (kvasir takes method, num_speculative_tokens`},
		{`{"method": "ngram", "num_speculative_tokens": 4, "Method": "x"}`, `unknown key "Method"`},
		{`{"method": "ngram", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 1}`, `key "draft_tensor_parallel_size" is vLLM's but kvasir does not take it`},
		{`{"method": "ngram", "num_speculative_tokens": 4, "method": "ngram"}`, `key "method" given twice`},
		{`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 0}`, "prompt_lookup_min 0: want at least 1"},
		{`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": -1}`, "prompt_lookup_max -1: want at least 1"},
		{`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 4, "prompt_lookup_max": 2}`, "prompt_lookup_min 4 is more than prompt_lookup_max 2"},
		{`{"method": "ngram", "num_speculative_tokens": 4, "model": "d.gguf"}`, "model does not go with method ngram"},
		{`{"method": "ngram", "num_speculative_tokens": 4, "draft_layers": 2}`, "draft_layers does not go with method ngram"},
		{`{"method": "draft_model", "num_speculative_tokens": 4}`, "method draft_model needs model"},
		{`{"method": "draft_model", "model": "", "num_speculative_tokens": 4}`, "model is empty"},
		{`{"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 4, "prompt_lookup_max": 3}`, "prompt_lookup_max does not go with method draft_model"},
		{`{"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 4, "draft_layers": 3}`, "draft_layers does not go with method draft_model"},
		{`{"method": "layer_skip", "num_speculative_tokens": 4}`, "method layer_skip needs draft_layers"},
		{`{"method": "layer_skip", "num_speculative_tokens": 4, "draft_layers": 0}`, "draft_layers 0: want at least 1"},
		{`{"method": "layer_skip", "num_speculative_tokens": 4, "draft_layers": 2, "model": "d.gguf"}`, "model does not go with method layer_skip"},
		{`{"method": "layer_skip", "model": "ngram", "num_speculative_tokens": 4, "draft_layers": 2}`, `model "ngram" names the ngram method, but method is "layer_skip"`},
	} {
		_, err := Parse([]byte(tc.json))
		if err == nil {
			t.Errorf("%s: no error, want %q", tc.json, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to contain %q", tc.json, err, tc.want)
		}
		if !strings.HasPrefix(err.Error(), "speculative config: ") {
			t.Errorf("%s: error %q does not say what it is about", tc.json, err)
		}
	}
}

// replayProposer is a custom proposer for the Go hook.
type replayProposer struct{}

func (replayProposer) Propose([]int32, int) []int32 { return nil }

func TestCheckGoConfig(t *testing.T) {
	// A custom proposer needs no method.
	c, err := Config{Proposer: replayProposer{}, NumSpeculativeTokens: 3}.Check()
	if err != nil || c.Method != "" || c.Proposer == nil {
		t.Errorf("custom proposer: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Proposer: replayProposer{}, Method: MethodNGram, NumSpeculativeTokens: 3}, "a custom Proposer takes no method"},
		{Config{Proposer: replayProposer{}, Model: "d.gguf", NumSpeculativeTokens: 3}, "a custom Proposer takes no method"},
		{Config{Proposer: replayProposer{}}, "num_speculative_tokens 0"},
		{Config{Method: MethodNGram, NumSpeculativeTokens: 3, PromptLookupMin: -1}, "prompt_lookup_min -1"},
		{Config{Method: MethodLayerSkip, NumSpeculativeTokens: 3, DraftLayers: -2}, "draft_layers -2"},
	} {
		if _, err := tc.c.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestConfigString(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 3}`, "ngram (n-grams of 2..3 tokens), up to 4 draft tokens, dynamic"},
		{`{"model": "d.gguf", "num_speculative_tokens": 5, "dynamic": false}`, "draft_model d.gguf, up to 5 draft tokens, fixed"},
		{`{"method": "layer_skip", "draft_layers": 2, "num_speculative_tokens": 3}`, "layer_skip (the first 2 layers), up to 3 draft tokens, dynamic"},
	} {
		c, err := Parse([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.json, got, tc.want)
		}
	}
}

func TestSpeculation(t *testing.T) {
	parse := func(s string) *Config {
		c, err := Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := parse(`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 3}`).Speculation(nil)
	if g, ok := s.Proposer.(NGram); !ok || g != (NGram{Min: 2, Max: 3}) || s.K != 4 || s.DraftModel != nil || s.DraftLayers != 0 {
		t.Errorf("ngram: %+v", s)
	}
	if d, ok := s.Policy.(*Dynamic); !ok || d.maxLen != 4 || d.catchUp {
		t.Errorf("ngram policy: %#v", s.Policy)
	}
	s = parse(`{"method": "layer_skip", "draft_layers": 2, "num_speculative_tokens": 3, "dynamic": false}`).Speculation(nil)
	if s.DraftLayers != 2 || s.Proposer != nil || s.Policy != (Fixed{K: 3}) {
		t.Errorf("layer_skip: %+v", s)
	}
	s = parse(`{"model": "d.gguf", "num_speculative_tokens": 5}`).Speculation(nil)
	if d, ok := s.Policy.(*Dynamic); !ok || !d.catchUp || s.K != 5 || s.Proposer != nil {
		t.Errorf("draft_model: %+v", s)
	}
	c, err := Config{Proposer: replayProposer{}, NumSpeculativeTokens: 2}.Check()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Speculation(nil); s.Proposer != (replayProposer{}) || s.K != 2 {
		t.Errorf("custom: %+v", s)
	}
}

// FuzzParseConfig: Parse never panics; what it accepts is a checked configuration (Check
// leaves it as it is) of a method kvasir runs, K in range, with the method's fields only.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"method": "ngram", "num_speculative_tokens": 4}`,
		`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 9, "dynamic": false}`,
		`{"model": "d.gguf", "num_speculative_tokens": 5}`,
		`{"method": "layer_skip", "draft_layers": 3, "num_speculative_tokens": 1}`,
		`{"model": "[ngram]", "num_speculative_tokens": 2}`,
		`{"method": "eagle", "num_speculative_tokens": 2}`,
		`{"num_speculative_tokens": 1e400}`,
		`{"a":{"b":[1,2,{"c":null}]}}`,
		`{"method": "ngram", "num_speculative_tokens": 4} x`,
		`[`, `{`, `{"`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "speculative config: ") {
				t.Fatalf("error %q does not say what it is about", err)
			}
			return
		}
		if c.NumSpeculativeTokens < 1 || c.NumSpeculativeTokens > engine.MaxSpeculativeTokens {
			t.Fatalf("accepted K %d", c.NumSpeculativeTokens)
		}
		again, err := c.Check()
		if err != nil || again != *c {
			t.Fatalf("Check changes an accepted config %+v: %+v, %v", *c, again, err)
		}
		switch c.Method {
		case MethodNGram:
			if c.PromptLookupMin < 1 || c.PromptLookupMin > c.PromptLookupMax || c.Model != "" || c.DraftLayers != 0 {
				t.Fatalf("bad ngram config %+v", *c)
			}
		case MethodDraftModel:
			if c.Model == "" || c.PromptLookupMin != 0 || c.PromptLookupMax != 0 || c.DraftLayers != 0 {
				t.Fatalf("bad draft_model config %+v", *c)
			}
		case MethodLayerSkip:
			if c.DraftLayers < 1 || c.Model != "" || c.PromptLookupMin != 0 || c.PromptLookupMax != 0 {
				t.Fatalf("bad layer_skip config %+v", *c)
			}
		default:
			t.Fatalf("accepted method %q", c.Method)
		}
		_ = c.String()
		_ = c.Speculation(nil)
	})
}
