package engine

import (
	"math"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestLongContextLogprobInvariance runs requests whose contexts span several of the CPU
// attention's fold chunks (a 300-token shared prefix and tails of 20 to 250 tokens) through
// engines that batch, chunk, cache prefixes and overlap steps differently, and requires the
// logprob of every generated token to be the same float, bit for bit, as when the requests
// run one at a time with whole prefills and no prefix cache. The model's weights are Q8_0,
// whose int8 matmuls sum each row in one order for any number of tokens, so any difference
// would come from attention (a lone long decode is split across threads, a batched one is
// not) or from the engine.
func TestLongContextLogprobInvariance(t *testing.T) {
	tm := tinyModelOf(t, quant.Q8_0)
	vocab := tm.m.Config().VocabSize
	shared := randomPrompt(77, 300, vocab)
	var reqs []Request
	for i, tail := range []int{20, 250, 90, 160, 45, 200} {
		p := append(slices.Clone(shared), randomPrompt(100+i, tail, vocab)...)
		reqs = append(reqs, Request{PromptTokens: p, Params: SamplingParams{MaxTokens: 8, IgnoreEOS: true, Logprobs: true}})
	}
	ref := sequential(t, tm.engine(t, Config{DisablePrefixCaching: true, DisableAsyncScheduling: true,
		SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 1024, MaxNumSeqs: 1}}), reqs)
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"batched", Config{SchedulerConfig: SchedulerConfig{MaxNumSeqs: 8, MaxNumBatchedTokens: 1024}}},
		{"chunked-48", Config{SchedulerConfig: SchedulerConfig{MaxNumSeqs: 8, MaxNumBatchedTokens: 48}}},
		{"chunked-sync", Config{DisableAsyncScheduling: true, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 3, MaxNumBatchedTokens: 100}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := tm.engine(t, c.cfg)
			got := generate(t, e, reqs)
			for i := range reqs {
				g, w := got[i][0], ref[i][0]
				if !slices.Equal(g.tokens, w.tokens) || len(g.lps) != len(w.lps) {
					t.Fatalf("request %d: tokens %v, want %v", i, g.tokens, w.tokens)
				}
				for j := range g.lps {
					a, b := g.lps[j].Token.Logprob, w.lps[j].Token.Logprob
					if math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("request %d token %d: logprob %v, alone %v", i, j, a, b)
					}
				}
			}
			if st := e.Stats(); st.PrefixHits == 0 {
				t.Errorf("no prefix cache hit (%+v)", st)
			}
		})
	}
}
