package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestEngineStress throws a random mix at an engine on the fake model, in a pool small
// enough to preempt: greedy requests with drafts (a proposer's, or a draft model's on odd
// rounds), beam searches, seeded parallel sampling, prompt logprobs, stop tokens, and
// requests cancelled midway, under both scheduling modes. Every greedy request gets plain greedy decoding's tokens, every
// beam search refBeam's beams, every request ends, the engine's invariants hold after
// every step, and nothing is held at the end (fakeEngine's checks).
func TestEngineStress(t *testing.T) {
	const vocab = 30
	forEachMode(t, func(t *testing.T, serial bool) {
		for round := range 8 {
			rng := rand.New(rand.NewPCG(uint64(round), 7))
			cfg := Config{NumBlocks: 40, DisableAsyncScheduling: serial,
				Speculation:     specWith(&oracleProposer{vocab: vocab, wrong: true}, 3),
				SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 20, MaxNumSeqs: 12}}
			noise := float32(-1)
			if round%2 == 1 {
				// A draft model instead of the proposer, on odd rounds.
				cfg.Speculation, noise = &Speculation{K: 3}, 2
			}
			e, _, _ := fakeEngineDraft(t, vocab, cfg, round == 1, noise)
			var wg sync.WaitGroup
			for i := range 30 {
				prompt := randomPrompt(100*round+i, 2+rng.IntN(20), vocab)
				p := SamplingParams{MaxTokens: 1 + rng.IntN(15), IgnoreEOS: true}
				kind := rng.IntN(6)
				switch kind {
				case 1:
					p.UseBeamSearch, p.N, p.LengthPenalty = true, 1+rng.IntN(3), float32(rng.IntN(2))
				case 2:
					seed := uint64(i)
					p.Temperature, p.Seed, p.N = 0.9, &seed, 1+rng.IntN(3)
				case 3:
					p.PromptLogprobs, p.PromptTopLogprobs = true, rng.IntN(3)
				case 4:
					p.StopTokenIDs = []int32{int32(rng.IntN(vocab))}
				}
				cancelAfter := -1
				if rng.IntN(5) == 0 {
					cancelAfter = rng.IntN(4)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					ch, err := e.Generate(ctx, Request{PromptTokens: prompt, Params: p})
					if err != nil {
						t.Errorf("request %d: %v", i, err)
						return
					}
					n := max(p.N, 1)
					toks := make([][]int32, n)
					finish := make([]string, n)
					got := 0
					timeout := time.After(30 * time.Second)
					for {
						select {
						case o, ok := <-ch:
							if !ok {
								check(t, i, kind, prompt, p, toks, finish, cancelAfter >= 0)
								return
							}
							toks[o.Index] = append(toks[o.Index], o.TokenIDs...)
							if o.FinishReason != "" {
								finish[o.Index] = o.FinishReason
							}
							if got++; got == cancelAfter {
								cancel()
							}
						case <-timeout:
							t.Errorf("request %d: no end", i)
							return
						}
					}
				}()
			}
			wg.Wait()
			waitIdle(t, e)
		}
	})
}

// check verifies one stress request's outputs (see TestEngineStress).
func check(t *testing.T, i, kind int, prompt []int32, p SamplingParams, toks [][]int32, finish []string, cancelled bool) {
	t.Helper()
	if cancelled {
		return // its stream stops when it is cancelled
	}
	for c, f := range finish {
		if f == "" {
			t.Errorf("request %d choice %d: no finish reason", i, c)
		}
	}
	switch kind {
	case 0, 3, 4, 5:
		want := fakeGreedy(30, prompt, p.MaxTokens, p.StopTokenIDs...)
		if !slices.Equal(toks[0], want) {
			t.Errorf("request %d (kind %d): %v, want %v", i, kind, toks[0], want)
		}
	case 1:
		for b, w := range refBeam(30, prompt, p.N, p.MaxTokens, p.LengthPenalty, nil) {
			if !slices.Equal(toks[b], w.tokens) {
				t.Errorf("request %d beam %d: %v, want %v", i, b, toks[b], w.tokens)
			}
		}
	}
}
