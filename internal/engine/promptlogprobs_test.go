package engine

import (
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestPromptLogprobs: the prompt logprobs of a prompt that ends with a greedy run's output
// equal, bit for bit, the logprobs that run reported for those tokens (Q8_0 weights give
// the same bits whatever the batch shape), whether the prompt is prefilled whole or in
// chunks of 7 tokens (several steps of scoring rows), alone or beside other requests, with
// a prefix-cache entry for it or not (a prompt-logprobs request takes no hits), and the
// top alternatives come sorted with the chosen token's logprob among them when it is the
// argmax.
func TestPromptLogprobs(t *testing.T) {
	tm := tinyModelOf(t, quant.Q8_0)
	vocab := tm.fm.Config.VocabSize
	prompt := randomPrompt(31, 20, vocab)
	for _, budget := range []int{0, 7} {
		forEachMode(t, func(t *testing.T, serial bool) {
			e := tm.engine(t, Config{DisableAsyncScheduling: serial, SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: budget}})
			run := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true, Logprobs: true}}})[0][0]
			full := append(slices.Clone(prompt), run.tokens...)
			got := generate(t, e, []Request{
				{PromptTokens: full, Params: SamplingParams{MaxTokens: 1, PromptLogprobs: true, PromptTopLogprobs: 3}},
				{PromptTokens: randomPrompt(32, 9, vocab), Params: SamplingParams{MaxTokens: 5}},
			})
			var plps []Logprob
			ch, err := e.Generate(t.Context(), Request{PromptTokens: full, Params: SamplingParams{MaxTokens: 2, PromptLogprobs: true, PromptTopLogprobs: 3}})
			if err != nil {
				t.Fatal(err)
			}
			outputs := 0
			for o := range ch {
				if o.PromptLogprobs != nil {
					outputs++
					plps = o.PromptLogprobs
					if !slices.Equal(o.PromptTokenIDs, full) {
						t.Errorf("prompt token ids %v, want %v", o.PromptTokenIDs, full)
					}
				}
			}
			if outputs != 1 {
				t.Fatalf("prompt logprobs came on %d outputs, want 1", outputs)
			}
			if got[0][0].usage.CachedPromptTokens != 0 {
				t.Errorf("a prompt-logprobs request took %d cached tokens", got[0][0].usage.CachedPromptTokens)
			}
			if len(plps) != len(full)-1 {
				t.Fatalf("%d prompt logprobs for %d prompt tokens", len(plps), len(full))
			}
			for i, lp := range plps {
				if lp.Token.ID != full[i+1] {
					t.Fatalf("entry %d scores token %d, want %d", i, lp.Token.ID, full[i+1])
				}
				if len(lp.Top) != 3 || lp.Top[0].Logprob < lp.Top[1].Logprob || lp.Top[1].Logprob < lp.Top[2].Logprob {
					t.Errorf("entry %d: top %v", i, lp.Top)
				}
			}
			for j, lp := range run.lps {
				p := plps[len(prompt)-1+j]
				if p.Token != lp.Token {
					t.Errorf("output token %d: prompt logprob %+v, the run's %+v", j, p.Token, lp.Token)
				}
				if p.Top[0] != p.Token {
					t.Errorf("output token %d (greedy): top %v does not start with it %+v", j, p.Top, p.Token)
				}
			}
		})
	}
}
