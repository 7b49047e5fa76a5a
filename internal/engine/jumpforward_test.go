package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// runForcer is a sample.Forcer over a vocabulary of 64 tokens with a rule like a grammar's
// fixed keys: a token t with t%4 == 0 opens a run, and the three tokens after it are forced
// to be t+1, t+2, t+3 (the mask allows only the next one). With merge set it also
// retokenizes as a tokenizer would merge a sampled token with forced bytes: a sampled opener
// t with t%8 == 0 is replaced by the opener t^32, whose run follows it.
type runForcer struct {
	merge bool
	hist  []int32
	mask  sample.Mask
}

const forcerVocab = 64

// forcedAfter returns the tokens the rule forces after hist.
func forcedAfter(hist []int32) []int32 {
	i := 0
	for i < len(hist) {
		if hist[i]%4 == 0 {
			i += 4
		} else {
			i++
		}
	}
	if i == len(hist) {
		return nil
	}
	open := hist[i-4]
	var out []int32
	for j := len(hist) - (i - 4); j <= 3; j++ {
		out = append(out, open+int32(j))
	}
	return out
}

func (f *runForcer) Mask() sample.Mask {
	next := forcedAfter(f.hist)
	if len(next) == 0 {
		return nil
	}
	f.mask = sample.NewMask(forcerVocab, next[0])
	return f.mask
}

func (f *runForcer) Accept(tokens []int32) error {
	for _, t := range tokens {
		if next := forcedAfter(f.hist); len(next) > 0 && t != next[0] {
			return fmt.Errorf("runForcer: token %d where %d is forced", t, next[0])
		}
		f.hist = append(f.hist, t)
	}
	return nil
}

func (f *runForcer) Rollback(n int) { f.hist = f.hist[:len(f.hist)-n] }

func (f *runForcer) Clone() sample.Stateful {
	return &runForcer{merge: f.merge, hist: slices.Clone(f.hist)}
}

func (f *runForcer) JumpForward(grow int) (int, []int32) {
	next := forcedAfter(f.hist)
	if len(next) == 0 || grow <= 0 {
		return 0, nil
	}
	if last := f.hist[len(f.hist)-1]; f.merge && len(next) == 3 && last%8 == 0 {
		r := last ^ 32
		toks := []int32{r, r + 1, r + 2, r + 3}
		return 1, toks[:min(len(toks), grow+1)]
	}
	return 0, next[:min(len(next), grow)]
}

// fakeGreedyForced is the reference of jump-forward on the fake model: greedy decoding
// under the forcer's mask, where after each sampled token the forcer's jump is applied
// (with jump false: never).
func fakeGreedyForced(prompt []int32, n int, merge, jump bool) []int32 {
	f := &runForcer{merge: merge}
	toks := slices.Clone(prompt)
	for len(f.hist) < n {
		l := fakeLogits(forcerVocab, toks)
		f.Mask().Apply(l)
		t := int32(sample.Greedy(l))
		f.hist = append(f.hist, t)
		toks = append(toks, t)
		if !jump {
			continue
		}
		replace, forced := f.JumpForward(n - len(f.hist))
		if replace > 0 {
			f.hist, toks = f.hist[:len(f.hist)-1], toks[:len(toks)-1]
		}
		f.hist = append(f.hist, forced...)
		toks = append(toks, forced...)
	}
	return f.hist
}

// TestJumpForward: forced tokens are appended without sampling and computed as one chunk.
// Without replacements the output is exactly the output without jump-forward (the forced
// tokens are what the mask allows one at a time); with replacements it is the reference's
// (greedy, the forcer's jumps applied after each sampled token). Both hold under async and
// serial scheduling, a batch of requests (two of them forking n = 2), prefix caching of a
// shared prompt, and n-gram style speculation; the fake model reads every context through
// the block tables, so a stale or misplaced KV entry would change the tokens; jump-forward
// takes fewer steps (without speculation); the forced tokens are counted; no block is left held (fakeEngine's
// cleanup).
func TestJumpForward(t *testing.T) {
	const n = 40
	prompts := [][]int32{randomPrompt(5, 9, forcerVocab), randomPrompt(6, 21, forcerVocab), randomPrompt(5, 9, forcerVocab)}
	for _, merge := range []bool{false, true} {
		for _, prop := range []Proposer{nil, &oracleProposer{vocab: forcerVocab, wrong: true}} {
			forEachMode(t, func(t *testing.T, serial bool) {
				steps := map[bool]int64{}
				outs := map[bool][][]int32{}
				for _, jump := range []bool{false, true} {
					e, fm := fakeEngine(t, forcerVocab, Config{Speculation: specWith(prop, 3), DisableAsyncScheduling: serial, DisableJumpForward: !jump}, false)
					var reqs []Request
					for i, p := range prompts {
						reqs = append(reqs, Request{PromptTokens: p, Params: SamplingParams{MaxTokens: n, IgnoreEOS: true, N: 1 + i%2},
							Processors: []sample.Stateful{&runForcer{merge: merge}}})
					}
					// Submitted as one, so that the steps do not depend on arrival times.
					chans, err := e.GenerateAll(t.Context(), reqs)
					if err != nil {
						t.Fatal(err)
					}
					got := make([][]result, len(chans))
					for i, ch := range chans {
						got[i] = collect(t, ch, reqs[i].Params.N)
					}
					for i, r := range got {
						want := fakeGreedyForced(prompts[i], n, merge, jump)
						for c, choice := range r {
							if !slices.Equal(choice.tokens, want) {
								t.Errorf("merge %v, proposer %v, jump %v: request %d choice %d: %v, want %v", merge, prop != nil, jump, i, c, choice.tokens, want)
							}
							outs[jump] = append(outs[jump], choice.tokens)
						}
					}
					steps[jump] = fm.steps.Load()
					forced := e.Stats().ForcedTokens
					if jump == (forced == 0) {
						t.Errorf("merge %v, jump %v: %d forced tokens", merge, jump, forced)
					}
				}
				if !merge && !slices.EqualFunc(outs[true], outs[false], slices.Equal) {
					t.Errorf("proposer %v: with jump-forward %v, without %v", prop != nil, outs[true], outs[false])
				}
				// (With speculation the steps depend on when drafting sequences sit out.)
				if prop == nil && steps[true] >= steps[false] {
					t.Errorf("merge %v, proposer %v: %d steps with jump-forward, %d without", merge, prop != nil, steps[true], steps[false])
				}
			})
		}
	}
}

// TestJumpForwardLimits: a jump stops at max_tokens (the forced run is cut, finish reason
// length), and a request asking for logprobs does not jump (its tokens are the plain ones,
// each with its logprob).
func TestJumpForwardLimits(t *testing.T) {
	prompt := randomPrompt(5, 9, forcerVocab)
	want := fakeGreedyForced(prompt, 40, false, false)
	// the first forced run: cut max_tokens inside it
	cut := 0
	for i, tok := range want {
		if tok%4 == 0 {
			cut = i + 2
			break
		}
	}
	e, _ := fakeEngine(t, forcerVocab, Config{}, false)
	got := generate(t, e, []Request{
		{PromptTokens: prompt, Params: SamplingParams{MaxTokens: cut, IgnoreEOS: true}, Processors: []sample.Stateful{&runForcer{}}},
		{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true, Logprobs: true}, Processors: []sample.Stateful{&runForcer{}}},
	})
	if r := got[0][0]; !slices.Equal(r.tokens, want[:cut]) || r.finish != FinishLength {
		t.Errorf("max_tokens %d: %v (%s), want %v", cut, r.tokens, r.finish, want[:cut])
	}
	if r := got[1][0]; !slices.Equal(r.tokens, want) || len(r.lps) != len(want) {
		t.Errorf("logprobs: %v with %d logprobs, want %v", r.tokens, len(r.lps), want)
	}
	if f := e.Stats().ForcedTokens; f != 1 {
		t.Errorf("%d forced tokens, want 1 (the cut run's)", f)
	}
}

// TestJumpForwardSeeded: seeded sampling under jump-forward gives the same tokens under
// async and serial scheduling, drawn on the device or on the host: a stale row (async only)
// takes no draw from the sequence's sampler.
func TestJumpForwardSeeded(t *testing.T) {
	prompt := randomPrompt(8, 11, forcerVocab)
	seed := uint64(11)
	var outs [][]int32
	for _, canSample := range []bool{true, false} {
		for _, serial := range []bool{false, true} {
			e, _ := fakeEngine(t, forcerVocab, Config{DisableAsyncScheduling: serial}, canSample)
			got := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true, Temperature: 1, Seed: &seed},
				Processors: []sample.Stateful{&runForcer{merge: true}}}})
			outs = append(outs, got[0][0].tokens)
			if e.Stats().ForcedTokens == 0 {
				t.Errorf("device %v serial %v: nothing forced", canSample, serial)
			}
		}
	}
	for i, o := range outs[1:] {
		if !slices.Equal(o, outs[0]) {
			t.Errorf("run %d: %v, run 0 %v", i+1, o, outs[0])
		}
	}
}
