package promptcompress

import (
	"context"
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir"
)

// EngineScorer is a Scorer on a kvasir engine: the model's prompt logprobs. The prompt is
// cut into windows that fit the engine's context, each scored as a sequence of its own
// after the vocabulary's BOS, all in one batch.
type EngineScorer struct {
	Engine *kvasir.Engine
	// Window is the most prompt tokens one sequence scores (0: the engine's context less
	// the BOS and the one token each sequence generates).
	Window int
}

// Encode tokenizes text without special tokens.
func (s EngineScorer) Encode(text string) ([]int32, error) { return s.Engine.Tokenize(text, false) }

// Decode turns tokens into text, special tokens left in (they were in the prompt).
func (s EngineScorer) Decode(ids []int32) (string, error) { return s.Engine.Detokenize(ids, false) }

// Surprisal scores tokens window by window: a window's first token is scored after the BOS
// alone (+Inf, always kept, when the vocabulary has none).
func (s EngineScorer) Surprisal(ctx context.Context, tokens []int32) ([]float64, error) {
	bos, err := s.Engine.Tokenize("", true)
	if err != nil {
		return nil, err
	}
	window := s.Window
	if window <= 0 {
		window = s.Engine.MaxModelLen() - len(bos) - 1
	}
	if window < 1 {
		return nil, fmt.Errorf("the scoring model's context of %d tokens holds no window", s.Engine.MaxModelLen())
	}
	var reqs []kvasir.Request
	for start := 0; start < len(tokens); start += window {
		prompt := append(append([]int32(nil), bos...), tokens[start:min(start+window, len(tokens))]...)
		reqs = append(reqs, kvasir.Request{PromptTokens: prompt, // the engine names it
			Params: kvasir.SamplingParams{MaxTokens: 1, PromptLogprobs: true}})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the requests end with the call, whatever happens
	chans, err := s.Engine.GenerateAll(ctx, reqs)
	if err != nil {
		return nil, err
	}
	out := make([]float64, 0, len(tokens))
	for i, ch := range chans {
		var lps []kvasir.Logprob
		got := false
		for o := range ch {
			if o.Err != nil {
				return nil, o.Err
			}
			if o.PromptTokenIDs != nil {
				lps, got = o.PromptLogprobs, true
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !got || len(lps) != len(reqs[i].PromptTokens)-1 {
			return nil, fmt.Errorf("window %d: %d prompt logprobs for %d tokens", i, len(lps), len(reqs[i].PromptTokens))
		}
		if len(bos) == 0 {
			out = append(out, math.Inf(1))
		}
		for _, lp := range lps[max(len(bos)-1, 0):] {
			out = append(out, -float64(lp.Token.Logprob))
		}
	}
	return out, nil
}
