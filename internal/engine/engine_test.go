package engine

import (
	"testing"
)

func TestGenerateSmoke(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{})
	res := generate(t, e, []Request{{PromptTokens: randomPrompt(1, 20, 320), Params: SamplingParams{MaxTokens: 8, IgnoreEOS: true}}})
	r := res[0][0]
	if len(r.tokens) != 8 || r.finish != FinishLength {
		t.Fatalf("got %d tokens, finish %q", len(r.tokens), r.finish)
	}
	if r.usage.PromptTokens != 20 || r.usage.CompletionTokens != 8 {
		t.Errorf("usage %+v", r.usage)
	}
	waitIdle(t, e)
}
