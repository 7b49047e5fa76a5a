package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/stattest"
)

// sequenceDist returns the exact distribution of the first n tokens sampled after prompt
// with params on the fake model (its logits through the sampler's processing, penalties
// told each token), over vocab^n sequences indexed in base vocab.
func sequenceDist(vocab int, prompt []int32, n int, p SamplingParams) []float64 {
	out := make([]float64, 1)
	out[0] = 1
	type state struct {
		toks []int32
		pen  *sample.Penalties
	}
	states := []state{{toks: prompt, pen: sample.NewPenalties(p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty, prompt)}}
	for range n {
		next := make([]float64, 0, len(out)*vocab)
		var nextStates []state
		for i, st := range states {
			var pen *sample.Penalties
			if st.pen != nil {
				pen = st.pen.Clone().(*sample.Penalties)
			}
			d := samplerFor(p, 0, pen, nil).Dist(fakeLogits(vocab, st.toks))
			for v := range int32(vocab) {
				next = append(next, out[i]*d.Prob(v))
				np := pen
				if np != nil {
					np = pen.Clone().(*sample.Penalties)
					np.Accept([]int32{v})
				}
				nextStates = append(nextStates, state{toks: append(append([]int32(nil), st.toks...), v), pen: np})
			}
		}
		out, states = next, nextStates
	}
	return out
}

// sampleSequences runs draws requests of n sampled tokens each (seeds 0..draws-1) and
// counts their token sequences (indexed as sequenceDist indexes them).
func sampleSequences(t *testing.T, e *Engine, vocab int, prompt []int32, n, draws int, p SamplingParams) []int {
	counts := make([]int, pow(vocab, n))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 192)
	for i := range draws {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			seed := uint64(i)
			q := p
			q.Seed, q.MaxTokens, q.IgnoreEOS = &seed, n, true
			ch, err := e.Generate(context.Background(), Request{PromptTokens: prompt, Params: q})
			if err != nil {
				t.Error(err)
				return
			}
			idx := 0
			for o := range ch {
				for _, tok := range o.TokenIDs {
					idx = idx*vocab + int(tok)
				}
			}
			mu.Lock()
			counts[idx]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return counts
}

func pow(b, e int) int {
	r := 1
	for range e {
		r *= b
	}
	return r
}

// TestDraftModelSamplingExact: sampling with a draft model (modified rejection sampling)
// draws token sequences from the target's distribution exactly: over 20,000 requests, the
// frequencies of the first four tokens (the first from the prompt's row, then two drafts
// verified and one more token in one step) match the exact distribution by a chi-square
// test (p > 0.001), at temperature 1 and with top-p and penalties on; plain sampling and
// point-mass drafts (a proposer's) pass the same test, and a broken rule that keeps every
// draft fails it.
func TestDraftModelSamplingExact(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("20,000 requests per case (the plain run counts them; the race run checks the draft path in the other tests)")
	}
	const vocab, n, draws = 5, 4, 20000
	prompt := randomPrompt(77, 5, vocab)
	cases := []SamplingParams{
		{Temperature: 1},
		{Temperature: 0.9, TopP: 0.8, RepetitionPenalty: 1.3, FrequencyPenalty: 0.2},
	}
	for ci, p := range cases {
		want := sequenceDist(vocab, prompt, n, p)
		run := func(name string, spec, broken bool, prop ...Proposer) float64 {
			var setup []func(*Engine)
			if broken {
				setup = append(setup, func(e *Engine) { e.keepAllDrafts = true })
			}
			cfg := Config{NumBlocks: 2049, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 256, MaxNumBatchedTokens: 4096}}
			noise := float32(-1)
			switch {
			case len(prop) > 0:
				cfg.Speculation = &Speculation{K: 3, Proposer: prop[0]}
			case spec:
				cfg.Speculation, noise = &Speculation{K: 3}, 4
			}
			e, _, _ := fakeEngineDraft(t, vocab, cfg, false, noise, setup...)
			counts := sampleSequences(t, e, vocab, prompt, n, draws, p)
			stat, dof, pv, err := stattest.ChiSquare(counts, want)
			if err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			fmt.Printf("case %d %s: chi-square %.1f, %d dof, p %.3g; drafts kept %d of %d\n", ci, name, stat, dof, pv, st.AcceptedDrafts, st.DraftTokens)
			if (spec || len(prop) > 0) && !broken && (st.DraftTokens == 0 || st.AcceptedDrafts == 0 || st.AcceptedDrafts == st.DraftTokens) {
				t.Errorf("case %d %s: drafts kept %d of %d: want some and not all", ci, name, st.AcceptedDrafts, st.DraftTokens)
			}
			return pv
		}
		if pv := run("plain", false, false); pv < 0.001 {
			t.Errorf("case %d: plain sampling fails the test (p %g)", ci, pv)
		}
		if pv := run("draft model", true, false); pv < 0.001 {
			t.Errorf("case %d: speculative sampling is not the target's distribution (p %g)", ci, pv)
		}
		if pv := run("point-mass proposer", false, false, &oracleProposer{vocab: vocab, wrong: true}); pv < 0.001 {
			t.Errorf("case %d: sampling with point-mass drafts is not the target's distribution (p %g)", ci, pv)
		}
		if pv := run("keep every draft", true, true); pv > 0.001 {
			t.Errorf("case %d: a rule keeping every draft passed the test (p %g)", ci, pv)
		}
	}
}
