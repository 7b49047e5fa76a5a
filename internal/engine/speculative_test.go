package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// replayProposer proposes the continuation of a recorded run (the tokens a greedy run of
// the same prompt produced), every third draft made wrong, so that a real model's paged KV
// cache sees drafts kept, rejected and rolled back.
type replayProposer struct {
	ref   []int32 // prompt then the recorded output
	vocab int
}

func (p *replayProposer) Propose(tokens []int32, n int) []int32 {
	if len(tokens) >= len(p.ref) || !slices.Equal(tokens, p.ref[:len(tokens)]) {
		return nil
	}
	draft := slices.Clone(p.ref[len(tokens):min(len(p.ref), len(tokens)+n)])
	for i := range draft {
		if (len(tokens)+i)%3 == 0 {
			draft[i] = (draft[i] + 1) % int32(p.vocab)
		}
	}
	return draft
}

// TestSpeculativeModel: on a real model with Q8_0 weights (the same bits for one token or
// several a step), decoding with drafts gives the tokens of decoding without, and a stop
// string found inside a run of kept drafts ends the text where it ends without drafts.
func TestSpeculativeModel(t *testing.T) {
	tm := tinyModelOf(t, quant.Q8_0)
	vocab := tm.fm.Config.VocabSize
	prompt := randomPrompt(51, 14, vocab)
	base := tm.engine(t, Config{})
	ref := generate(t, base, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true}}})[0][0]
	r := []rune(ref.text)
	if len(r) < 30 {
		t.Fatalf("the reference text %q is too short to take a stop string from", ref.text)
	}
	stop := string(r[20:23])
	stopRef := generate(t, base, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true, Stop: []string{stop}}}})[0][0]
	prop := &replayProposer{ref: append(slices.Clone(prompt), ref.tokens...), vocab: vocab}
	forEachMode(t, func(t *testing.T, serial bool) {
		e := tm.engineWithHook(t, Config{Speculation: specWith(prop, 4), DisableAsyncScheduling: serial}, func(e *Engine) {
			if err := checkEngine(e); err != nil {
				t.Errorf("invariant: %v", err)
			}
		})
		got := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true}}})[0][0]
		if !slices.Equal(got.tokens, ref.tokens) || got.text != ref.text {
			t.Errorf("with drafts %v, without %v", got.tokens, ref.tokens)
		}
		got = generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true, Stop: []string{stop}}}})[0][0]
		if got.text != stopRef.text || got.finish != FinishStop || strings.Contains(got.text, stop) {
			t.Errorf("stop %q with drafts: %q (%s), without %q", stop, got.text, got.finish, stopRef.text)
		}
		if got.usage.CompletionTokens != stopRef.usage.CompletionTokens {
			t.Errorf("stop %q: %d completion tokens with drafts, %d without", stop, got.usage.CompletionTokens, stopRef.usage.CompletionTokens)
		}
		waitIdle(t, e)
	})
}
