package engine

import (
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// openModel binds the model file at the testdata path p (tokenizer tok, "" for its own).
func openModel(t *testing.T, p, tok string) *tinyModel {
	t.Helper()
	opt := format.Options{}
	if tok != "" {
		opt.Tokenizer = testdata.Path(t, tok)
	}
	fm, err := format.Open(testdata.Path(t, p), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	return bindModel(t, fm, quant.F32)
}

// TestDraftModelRealPairs: real target/draft pairs of one vocabulary give, with a draft
// model, the greedy tokens of decoding without one, alone and batched, under both
// scheduling modes: stories260K with llama2xs (independently trained, partial agreement)
// and TinyStories-656K (F32) with its own Q8_0 GGUF.
func TestDraftModelRealPairs(t *testing.T) {
	pairs := []struct {
		name          string
		target, draft *tinyModel
	}{
		{"stories260K+llama2xs", openModel(t, "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin"),
			openModel(t, "models/llama2xs/llama2xs.bin", "models/stories260K/tok512.bin")},
		{"tinystories-656k+Q8_0", openModel(t, "models/tinystories-656k", ""),
			openModel(t, "models/tinystories-656k-gguf/TinyStories-656K-Q8_0.gguf", "")},
	}
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			var reqs []Request
			for i, p := range []string{"Once upon a time", "The little dog", "Lily and Tom went to the", "One day"} {
				reqs = append(reqs, Request{Prompt: p, Params: SamplingParams{MaxTokens: 60 + 10*i, IgnoreEOS: true}})
			}
			base := pair.target.engine(t, Config{})
			want := generate(t, base, reqs)
			forEachMode(t, func(t *testing.T, serial bool) {
				e := pair.target.engineWithHook(t, Config{DisableAsyncScheduling: serial,
					Speculation: &Speculation{K: 4, DraftModel: pair.draft.m}}, func(e *Engine) {
					if err := checkEngine(e); err != nil {
						t.Errorf("invariant: %v", err)
					}
				})
				for _, batch := range [][]Request{reqs[:1], reqs} {
					got := generate(t, e, batch)
					for i := range batch {
						if !slices.Equal(got[i][0].tokens, want[i][0].tokens) {
							t.Errorf("request %d (batch of %d): with the draft %v, without %v", i, len(batch), got[i][0].tokens, want[i][0].tokens)
						}
					}
				}
				waitIdle(t, e)
				st := e.Stats()
				t.Logf("%s: kept %d of %d drafts (%.0f%%) in %d verifications", pair.name, st.AcceptedDrafts, st.DraftTokens,
					100*float64(st.AcceptedDrafts)/float64(max(st.DraftTokens, 1)), st.SpecDrafts)
				if st.AcceptedDrafts == 0 || st.AcceptedDrafts == st.DraftTokens {
					t.Errorf("kept %d of %d drafts: a real pair agrees in part", st.AcceptedDrafts, st.DraftTokens)
				}
			})
		})
	}
}

// TestDraftLayers: self-speculation with the target's first layers (their keys and values
// the target's own) gives the greedy tokens of decoding without it, alone and batched,
// under both scheduling modes, on stories260K (5 layers, drafting with 2 and with 4).
func TestDraftLayers(t *testing.T) {
	tm := openModel(t, "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin")
	var reqs []Request
	for i, p := range []string{"Once upon a time", "The cat", "Tom had a big red"} {
		reqs = append(reqs, Request{Prompt: p, Params: SamplingParams{MaxTokens: 50 + 20*i, IgnoreEOS: true}})
	}
	want := generate(t, tm.engine(t, Config{}), reqs)
	for _, layers := range []int{2, 4} {
		forEachMode(t, func(t *testing.T, serial bool) {
			e := tm.engineWithHook(t, Config{DisableAsyncScheduling: serial, Speculation: &Speculation{K: 3, DraftLayers: layers}},
				func(e *Engine) {
					if err := checkEngine(e); err != nil {
						t.Errorf("invariant: %v", err)
					}
				})
			for _, batch := range [][]Request{reqs[:1], reqs} {
				got := generate(t, e, batch)
				for i := range batch {
					if !slices.Equal(got[i][0].tokens, want[i][0].tokens) {
						t.Errorf("%d layers, batch of %d, request %d: %v, want %v", layers, len(batch), i, got[i][0].tokens, want[i][0].tokens)
					}
				}
			}
			waitIdle(t, e)
			st := e.Stats()
			t.Logf("%d of 5 layers: kept %d of %d drafts", layers, st.AcceptedDrafts, st.DraftTokens)
			if st.DraftTokens == 0 || st.AcceptedDrafts == 0 {
				t.Errorf("%d layers: kept %d of %d drafts", layers, st.AcceptedDrafts, st.DraftTokens)
			}
		})
	}
}
