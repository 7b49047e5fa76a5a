package kvasir

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/spec"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// mustSpec parses a --speculative-config for a test.
func mustSpec(t *testing.T, js string) *SpeculativeConfig {
	t.Helper()
	c, err := ParseSpeculativeConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSpeculativeNGram: an ngram configuration leaves greedy output unchanged (stories260K
// in Q8_0: the same bits for one token a step or several), and the engine reports the
// configuration it runs with its defaults filled in.
func TestSpeculativeNGram(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K-Q8_0.gguf")
	opt := Options{Threads: 2, KVCacheMemory: 4 << 20}
	plain, err := Open(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if plain.Speculative() != nil || plain.Draft() != nil {
		t.Error("an engine without a speculative config speculates")
	}
	req := Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 60, IgnoreEOS: true}}
	_, ref := storyTokens(t, plain, req)

	opt.Speculative = mustSpec(t, `{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`)
	e, err := Open(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := e.Speculative()
	if c == nil || c.Method != spec.MethodNGram || c.PromptLookupMin != 1 || c.PromptLookupMax != 3 || c.NumSpeculativeTokens != 4 || e.Draft() != nil {
		t.Errorf("the engine's config: %+v", c)
	}
	if _, got := storyTokens(t, e, req); !slices.Equal(got, ref) {
		t.Errorf("with ngram drafts %v, without %v", got, ref)
	}
}

// trainedPair returns the trained target and draft of ../shared/testdata.
func trainedPair(t *testing.T) (target, draft string) {
	return testdata.Path(t, "models/trained/target"), testdata.Path(t, "models/trained/draft")
}

// TestSpeculativeDraftModel: a draft_model configuration loads the draft on the target's
// backends and sizes the KV cache for both models' keys and values per block; greedy
// output is the target's.
func TestSpeculativeDraftModel(t *testing.T) {
	target, draft := trainedPair(t)
	opt := Options{Threads: 2, KVCacheMemory: 16 << 20}
	plain, err := Open(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	req := Request{Prompt: "It was a dark and stormy night", Params: SamplingParams{MaxTokens: 24, IgnoreEOS: true}}
	_, ref := storyTokens(t, plain, req)

	opt.Speculative = mustSpec(t, `{"model": "`+draft+`", "num_speculative_tokens": 4}`)
	e, err := Open(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d := e.Draft()
	if d == nil || d.File().Config.Layers != 3 || e.Speculative().Method != spec.MethodDraftModel {
		t.Fatalf("draft %v, config %+v", d, e.Speculative())
	}
	if d.bes[0] != e.Loaded().bes[0] || d.owned {
		t.Error("the draft does not run on the target's backends")
	}
	// f32 on the CPU: target 2 x 6 x 4 x 64 x 4 B, draft 2 x 3 x 2 x 64 x 4 B per token.
	s := e.sizing
	if s.BytesPerToken != 12288 || s.DraftBytesPerToken != 3072 || s.NumBlocks != int((16<<20)/(15360*16)) {
		t.Errorf("KV sizing: %d + %d B/token, %d blocks", s.BytesPerToken, s.DraftBytesPerToken, s.NumBlocks)
	}
	if !strings.Contains(e.KVCacheSizing(), "+ 3072 B/token of the draft model") {
		t.Errorf("sizing line %q", e.KVCacheSizing())
	}
	if _, got := storyTokens(t, e, req); !slices.Equal(got, ref) {
		t.Errorf("with a draft model %v, without %v", got, ref)
	}
}

// TestSpeculativeErrors: what cannot work is refused at start, naming what is wrong.
func TestSpeculativeErrors(t *testing.T) {
	target, draft := trainedPair(t)
	stories := testdata.Path(t, "models/stories260K/stories260K-Q8_0.gguf")
	for _, tc := range []struct {
		name, target string
		opt          Options
		want         string
	}{
		{"vocabulary size", target, Options{Speculative: &SpeculativeConfig{Model: stories, NumSpeculativeTokens: 4}},
			"draft model stories260K-Q8_0.gguf has a vocabulary of 512 tokens, the target target one of 8192"},
		{"draft context", target, Options{MaxModelLen: 1024, Speculative: &SpeculativeConfig{Model: draft, NumSpeculativeTokens: 4}},
			"draft model draft has a context of 512 tokens, shorter than the 1024 of the target target"},
		{"missing draft", target, Options{Speculative: &SpeculativeConfig{Model: "/nonexistent/draft.gguf", NumSpeculativeTokens: 4}},
			"draft model /nonexistent/draft.gguf"},
		{"draft layers", stories, Options{Speculative: &SpeculativeConfig{Method: spec.MethodLayerSkip, DraftLayers: 5, NumSpeculativeTokens: 2}},
			"draft_layers 5: the target stories260K-Q8_0.gguf has 5 layers; want 1..4"},
		{"bad K", stories, Options{Speculative: &SpeculativeConfig{Method: spec.MethodNGram, NumSpeculativeTokens: 17}},
			"num_speculative_tokens 17: want 1..16"},
		{"unknown method", stories, Options{Speculative: &SpeculativeConfig{Method: "eagle", NumSpeculativeTokens: 2}},
			`method "eagle" is vLLM's but kvasir does not run it`},
	} {
		tc.opt.Threads, tc.opt.KVCacheMemory = 2, 16<<20
		e, err := Open(tc.target, tc.opt)
		if err == nil {
			e.Close()
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		}
	}
}

// TestSameVocabulary: a draft whose tokens differ from the target's is refused, naming the
// first token that differs.
func TestSameVocabulary(t *testing.T) {
	target, _ := trainedPair(t)
	fm, err := format.Open(target, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	loaded := func(path string, v *tokenizer.Vocab) *Loaded {
		tok, err := tokenizer.New(v)
		if err != nil {
			t.Fatal(err)
		}
		return &Loaded{fm: &format.Model{Path: path, Config: fm.Config}, tok: tok}
	}
	other := *fm.Vocab
	other.Tokens = slices.Clone(other.Tokens)
	other.Tokens[300] = "zzzz"
	tl := loaded("target", fm.Vocab)
	if err := sameVocabulary(tl, loaded("same", fm.Vocab)); err != nil {
		t.Errorf("the same vocabulary: %v", err)
	}
	err = sameVocabulary(tl, loaded("other", &other))
	if err == nil || !strings.Contains(err.Error(), `draft model other has another vocabulary than the target target: token 300 is "zzzz" in the draft`) {
		t.Errorf("another vocabulary: %v", err)
	}
	short := *fm.Vocab
	n := len(short.Tokens) - 1
	short.Tokens = short.Tokens[:n]
	if short.Types != nil {
		short.Types = short.Types[:n]
	}
	if short.Scores != nil {
		short.Scores = short.Scores[:n]
	}
	if err := sameVocabulary(tl, loaded("short", &short)); err == nil || !strings.Contains(err.Error(), "tokenizer of 8191 tokens") {
		t.Errorf("a shorter tokenizer: %v", err)
	}
	// Without a vocabulary (a llama2.c checkpoint with no tokenizer), the size decides.
	if err := sameVocabulary(tl, &Loaded{fm: &format.Model{Path: "bare", Config: fm.Config}}); err != nil {
		t.Errorf("a draft without a vocabulary: %v", err)
	}
}
