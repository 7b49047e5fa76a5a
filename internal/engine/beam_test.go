package engine

import (
	"cmp"
	"math"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// refBeam is beam search written plainly over fakeLogits: vLLM's algorithm (pool every
// beam's top 2W continuations, stop tokens finish a beam, the W best others by
// length-penalized score live on; after maxTokens steps the W best of all finished beams).
func refBeam(vocab int, prompt []int32, width, maxTokens int, penalty float32, stop []int32) []beamResult {
	type beam struct {
		toks []int32
		cum  float64
	}
	score := func(n int, stop bool, cum float64) float64 { return beamScore(n, stop, cum, penalty) }
	live := []beam{{}}
	var done []beamResult
	for step := 0; step < maxTokens && len(live) > 0; step++ {
		type cand struct {
			b     beam
			tok   sample.TokenLogprob
			score float64
		}
		var next []cand
		for _, b := range live {
			_, top := sample.Logprobs(fakeLogits(vocab, append(slices.Clone(prompt), b.toks...)), -1, 2*width)
			for _, c := range top {
				cum := b.cum + float64(c.Logprob)
				if slices.Contains(stop, c.ID) {
					done = append(done, beamResult{tokens: append(slices.Clone(b.toks), c.ID), cum: cum, finish: FinishStop})
					continue
				}
				next = append(next, cand{b, c, score(len(prompt)+len(b.toks)+1, false, cum)})
			}
		}
		slices.SortStableFunc(next, func(a, b cand) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			return cmp.Compare(a.tok.ID, b.tok.ID)
		})
		live = live[:0]
		for _, c := range next[:min(len(next), width)] {
			live = append(live, beam{toks: append(slices.Clone(c.b.toks), c.tok.ID), cum: c.b.cum + float64(c.tok.Logprob)})
		}
	}
	for _, b := range live {
		done = append(done, beamResult{tokens: b.toks, cum: b.cum, finish: FinishLength})
	}
	final := func(b beamResult) float64 { return score(len(prompt)+len(b.tokens), b.finish == FinishStop, b.cum) }
	slices.SortStableFunc(done, func(a, b beamResult) int { return cmp.Compare(final(b), final(a)) })
	return done[:min(len(done), width)]
}

// TestBeamSearchReference: the engine's beam search returns what refBeam does (tokens,
// order, finish reasons, cumulative logprobs), for several widths and length penalties,
// with stop tokens, under both scheduling modes and in a pool small enough to preempt
// beams; the engine's invariants hold throughout and nothing leaks.
func TestBeamSearchReference(t *testing.T) {
	const vocab = 24
	prompt := randomPrompt(17, 6, vocab)
	stop := []int32{5, 11}
	for _, width := range []int{1, 2, 4} {
		for _, lp := range []float32{0, 1} {
			want := refBeam(vocab, prompt, width, 9, lp, stop)
			for _, blocks := range []int{257, 12} {
				forEachMode(t, func(t *testing.T, serial bool) {
					e, _ := fakeEngine(t, vocab, Config{NumBlocks: blocks, DisableAsyncScheduling: serial}, false)
					reqs := []Request{{PromptTokens: prompt, Params: SamplingParams{N: width, UseBeamSearch: true, LengthPenalty: lp, MaxTokens: 9, StopTokenIDs: stop}}}
					// A second request beside it, to share the steps.
					reqs = append(reqs, Request{PromptTokens: randomPrompt(3, 5, vocab), Params: SamplingParams{MaxTokens: 7}})
					got := generate(t, e, reqs)[0]
					if len(got) != width {
						t.Fatalf("width %d: %d choices", width, len(got))
					}
					for i, w := range want {
						if !slices.Equal(got[i].tokens, w.tokens) || got[i].finish != w.finish {
							t.Errorf("width %d penalty %g blocks %d: beam %d %v (%s), want %v (%s)", width, lp, blocks, i, got[i].tokens, got[i].finish, w.tokens, w.finish)
						}
					}
				})
			}
		}
	}
}

// TestBeamSearchModel: on a real model, beam search of width 1 equals greedy decoding,
// and width 4 returns 4 distinct beams in score order whose cumulative logprobs are the
// sums of their tokens' logprobs and match the model's own prompt logprobs of each beam.
func TestBeamSearchModel(t *testing.T) {
	tm := tinyModelOf(t, quant.Q8_0)
	e := tm.engine(t, Config{})
	vocab := tm.fm.Config.VocabSize
	prompt := randomPrompt(41, 10, vocab)
	const n = 16
	res := generate(t, e, []Request{
		{PromptTokens: prompt, Params: SamplingParams{MaxTokens: n, IgnoreEOS: true}},
		{PromptTokens: prompt, Params: SamplingParams{MaxTokens: n, IgnoreEOS: true, UseBeamSearch: true, N: 1}},
	})
	if !slices.Equal(res[0][0].tokens, res[1][0].tokens) {
		t.Errorf("width 1: %v, greedy %v", res[1][0].tokens, res[0][0].tokens)
	}

	ch, err := e.Generate(t.Context(), Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: n, IgnoreEOS: true, UseBeamSearch: true, N: 4, LengthPenalty: 1, Logprobs: true}})
	if err != nil {
		t.Fatal(err)
	}
	var beams []Output
	for o := range ch {
		beams = append(beams, o)
	}
	if len(beams) != 4 {
		t.Fatalf("%d outputs, want 4", len(beams))
	}
	prev := math.Inf(1)
	for i, b := range beams {
		if b.Index != i || len(b.TokenIDs) != n || b.FinishReason != FinishLength {
			t.Fatalf("beam %d: index %d, %d tokens, finish %q", i, b.Index, len(b.TokenIDs), b.FinishReason)
		}
		for _, o := range beams[:i] {
			if slices.Equal(o.TokenIDs, b.TokenIDs) {
				t.Errorf("beam %d repeats beam %d", i, o.Index)
			}
		}
		if s := logprobSum(b.Logprobs); !near(s, b.CumulativeLogprob, 1e-5) {
			t.Errorf("beam %d: cumulative logprob %g, its tokens' logprobs sum to %g", i, b.CumulativeLogprob, s)
		}
		score := beamScore(len(prompt)+n, false, b.CumulativeLogprob, 1)
		if score > prev {
			t.Errorf("beam %d scores %g after %g", i, score, prev)
		}
		prev = score
		// The model's own account of the beam, as prompt logprobs.
		full := append(slices.Clone(prompt), b.TokenIDs...)
		c, err := e.Generate(t.Context(), Request{PromptTokens: full, Params: SamplingParams{MaxTokens: 1, PromptLogprobs: true}})
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for o := range c {
			sum += logprobSum(o.PromptLogprobs[len(prompt)-1:])
		}
		if !near(sum, b.CumulativeLogprob, 1e-5) {
			t.Errorf("beam %d: cumulative logprob %g, prompt logprobs of the beam %g", i, b.CumulativeLogprob, sum)
		}
	}
	waitIdle(t, e)
}
