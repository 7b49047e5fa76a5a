package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// workload makes count greedy requests, every other one sharing a 40-token prefix, with
// prompts of 5..64 tokens and 12 output tokens.
func workload(count, vocab int) []Request {
	shared := randomPrompt(999, 40, vocab)
	reqs := make([]Request, count)
	for i := range reqs {
		p := randomPrompt(i, 5+(i*7)%60, vocab)
		if i%2 == 0 {
			p = append(slices.Clone(shared), p[:min(len(p), 5+i%9)]...)
		}
		reqs[i] = Request{PromptTokens: p, Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true}}
	}
	return reqs
}

// sequential runs requests one at a time.
func sequential(t *testing.T, e *Engine, reqs []Request) [][]result {
	out := make([][]result, len(reqs))
	for i, r := range reqs {
		ch, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = collect(t, ch, 1)
	}
	return out
}

// deepseekModel is the synthesized DeepSeek-V2 (multi-head latent attention over a cache
// of one latent vector a token, a dense layer, routed and shared experts), F32.
func deepseekModel(t testing.TB) *tinyModel {
	t.Helper()
	shape, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	fm, err := synth.Model(shape, quant.F32, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	return bindModel(t, fm, quant.F32)
}

// TestGreedyInvariance: batching, chunked prefill, prefix caching and preemption do not
// change greedy tokens, with asynchronous scheduling on and off and with an F32, F16, int8
// or FP8 KV cache: every request gets the tokens of the model run one request at a time,
// serially, with a cache of the same type (a quantized cache's codes and scales depend only
// on the token's own keys and values, so a shared prefix block holds what a fresh one would).
func TestGreedyInvariance(t *testing.T) {
	models := map[string]func(testing.TB) *tinyModel{"synth": newTinyModel, "stories260K": storiesModel,
		"stories260K-f16-cache":  storiesF16Model,
		"stories260K-int8-cache": func(t testing.TB) *tinyModel { return openStoriesModel(t, quant.KVInt8) },
		"stories260K-fp8-cache":  func(t testing.TB) *tinyModel { return openStoriesModel(t, quant.KVFP8E4M3) },
		"deepseek-v2-tiny":       deepseekModel}
	for name, mk := range models {
		t.Run(name, func(t *testing.T) {
			tm := mk(t)
			vocab := tm.m.Config().VocabSize
			reqs := workload(64, vocab)
			ref := sequential(t, tm.engine(t, Config{DisablePrefixCaching: true, DisableAsyncScheduling: true, SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 4096, MaxNumSeqs: 1}}), reqs)
			cases := []struct {
				name       string
				cfg        Config
				preempt    bool
				sequential bool
			}{
				{name: "batch64-prefix", cfg: Config{SchedulerConfig: SchedulerConfig{MaxNumSeqs: 64}}},
				{name: "batch64-noprefix", cfg: Config{DisablePrefixCaching: true, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 64}}},
				{name: "sequential-prefix", cfg: Config{}, sequential: true},
				{name: "chunked", cfg: Config{SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 7, MaxNumSeqs: 64}}},
				{name: "no-chunking", cfg: Config{SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 128, MaxNumSeqs: 64, DisableChunkedPrefill: true}}},
				{name: "preemption", cfg: Config{NumBlocks: 24, BlockSize: 8, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 64}}, preempt: true},
				{name: "preemption-noprefix", cfg: Config{NumBlocks: 24, BlockSize: 8, DisablePrefixCaching: true, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 64, MaxNumBatchedTokens: 16}}, preempt: true},
			}
			forEachMode(t, func(t *testing.T, serial bool) {
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						c.cfg.DisableAsyncScheduling = serial
						var stepErr error
						e := tm.engineWithHook(t, c.cfg, func(e *Engine) {
							if err := checkEngine(e); err != nil && stepErr == nil {
								stepErr = err
							}
						})
						var got [][]result
						if c.sequential {
							got = sequential(t, e, reqs)
						} else {
							got = generate(t, e, reqs)
						}
						for i := range reqs {
							if !slices.Equal(got[i][0].tokens, ref[i][0].tokens) {
								t.Errorf("request %d: tokens %v, want %v", i, got[i][0].tokens, ref[i][0].tokens)
							}
						}
						waitIdle(t, e)
						e.Close()
						if stepErr != nil {
							t.Errorf("invariant broken: %v", stepErr)
						}
						st := e.Stats()
						if c.preempt && st.Preemptions == 0 {
							t.Errorf("no preemption happened (%+v)", st)
						}
						if !c.cfg.DisablePrefixCaching && st.PrefixHits == 0 {
							t.Errorf("no prefix cache hit (%+v)", st)
						}
						t.Logf("%+v", st)
					})
				}
			})
		})
	}
}

// TestGreedyInvarianceMLAReleasedDims: on the released models' attention geometry
// (deepseek-v2-lite-attn: 16 heads over one cached vector of 64 + 512 values, held once as
// key and value), batching, chunked prefill, prefix caching and preemption do not change
// greedy tokens: a shorter workload than TestGreedyInvariance's (the shape is larger).
func TestGreedyInvarianceMLAReleasedDims(t *testing.T) {
	shape, err := synth.Lookup("deepseek-v2-lite-attn")
	if err != nil {
		t.Fatal(err)
	}
	fm, err := synth.Model(shape, quant.F32, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	tm := bindModel(t, fm, quant.F32)
	reqs := workload(12, tm.m.Config().VocabSize)
	ref := sequential(t, tm.engine(t, Config{DisablePrefixCaching: true, DisableAsyncScheduling: true, SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 4096, MaxNumSeqs: 1}}), reqs)
	for _, c := range []struct {
		name                string
		cfg                 Config
		preempt, sequential bool
	}{
		{name: "batch", cfg: Config{SchedulerConfig: SchedulerConfig{MaxNumSeqs: 12}}},
		{name: "sequential-prefix", cfg: Config{}, sequential: true},
		{name: "chunked", cfg: Config{SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 7, MaxNumSeqs: 12}}},
		{name: "preemption", cfg: Config{NumBlocks: 16, BlockSize: 8, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 12}}, preempt: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := tm.engine(t, c.cfg)
			var got [][]result
			if c.sequential {
				got = sequential(t, e, reqs)
			} else {
				got = generate(t, e, reqs)
			}
			for i := range reqs {
				if !slices.Equal(got[i][0].tokens, ref[i][0].tokens) {
					t.Errorf("request %d: tokens %v, want %v", i, got[i][0].tokens, ref[i][0].tokens)
				}
			}
			waitIdle(t, e)
			e.Close()
			st := e.Stats()
			if c.preempt && st.Preemptions == 0 {
				t.Errorf("no preemption happened (%+v)", st)
			}
			if c.sequential && st.PrefixHits == 0 { // one request after another: the shared prefix is cached
				t.Errorf("no prefix cache hit (%+v)", st)
			}
		})
	}
}
