package engine

import (
	"context"
	"slices"
	"testing"
)

// TestDraftModelGreedy: with a draft model, greedy requests get exactly plain greedy
// decoding's tokens, under both scheduling modes, in a pool small enough to preempt, with
// prefix hits and chunked prefill; a draft identical to the target keeps every draft (so
// its cache holds exactly the sequences' keys and values: a stale or misplaced draft entry
// would change a draft and cost a rejection), and a noisy one keeps some and not others.
func TestDraftModelGreedy(t *testing.T) {
	const vocab = 50
	for _, pool := range []int{257, 30} {
		for _, noise := range []float32{0, 3} {
			forEachMode(t, func(t *testing.T, serial bool) {
				cfg := Config{NumBlocks: pool, DisableAsyncScheduling: serial, Speculation: &Speculation{K: 4},
					SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 24}}
				e, _, _ := fakeEngineDraft(t, vocab, cfg, false, noise)
				reqs := fakeRequests(vocab, SamplingParams{})
				got := generate(t, e, reqs)
				for i, r := range reqs {
					if want := fakeGreedy(vocab, r.PromptTokens, r.Params.MaxTokens); !slices.Equal(got[i][0].tokens, want) {
						t.Errorf("pool %d noise %g: request %d: %v, want %v", pool, noise, i, got[i][0].tokens, want)
					}
				}
				st := e.Stats()
				switch {
				case st.DraftTokens == 0 || st.SpecDrafts == 0:
					t.Errorf("pool %d noise %g: no drafts verified", pool, noise)
				case noise == 0 && pool == 257 && st.AcceptedDrafts != st.DraftTokens:
					t.Errorf("a draft equal to the target kept %d of %d drafts", st.AcceptedDrafts, st.DraftTokens)
				case noise > 0 && (st.AcceptedDrafts == 0 || st.AcceptedDrafts == st.DraftTokens):
					t.Errorf("a noisy draft kept %d of %d drafts: want some and not all", st.AcceptedDrafts, st.DraftTokens)
				}
				if pool == 30 && st.Preemptions == 0 {
					t.Error("no preemption in a 30-block pool")
				}
			})
		}
	}
}

// TestDraftModelSteps: a draft equal to the target makes a lone request take K+1 tokens a
// step, and its per-position counters count every position.
func TestDraftModelSteps(t *testing.T) {
	const vocab, n, k = 50, 40, 4
	e, fm, dm := fakeEngineDraft(t, vocab, Config{Speculation: &Speculation{K: k}}, false, 0)
	prompt := randomPrompt(2, 9, vocab)
	got := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: n, IgnoreEOS: true}}})
	if want := fakeGreedy(vocab, prompt, n); !slices.Equal(got[0][0].tokens, want) {
		t.Fatalf("tokens %v, want %v", got[0][0].tokens, want)
	}
	waitIdle(t, e)
	if steps := fm.steps.Load(); steps > 1+(n+k)/(k+1) {
		t.Errorf("%d target steps for %d tokens, want at most %d", steps, n, 1+(n+k)/(k+1))
	}
	st := e.Stats()
	for i := range k {
		if st.AcceptedPerPos[i] != st.SpecDrafts && i < k-1 {
			t.Errorf("position %d kept %d times in %d verifications", i, st.AcceptedPerPos[i], st.SpecDrafts)
		}
	}
	if dm.steps.Load() < fm.steps.Load() {
		t.Errorf("the draft ran %d passes for %d target steps", dm.steps.Load(), fm.steps.Load())
	}
}

// recordPolicy is a SpecPolicy that gives every candidate k drafts and records its calls.
type recordPolicy struct {
	k                            int
	calls, verified, done, costs int
	kept, drafted                int
	maxLenSeen                   int
}

func (p *recordPolicy) DraftLens(others int, cands []SpecCandidate, lens []int) {
	p.calls++
	for i, c := range cands {
		lens[i] = p.k
		p.maxLenSeen = max(p.maxLenSeen, c.MaxLen)
	}
}
func (p *recordPolicy) Verified(seq string, n, kept int) {
	p.verified++
	p.drafted += n
	p.kept += kept
}
func (p *recordPolicy) Done(seq string) { p.done++ }
func (p *recordPolicy) Stepped(c StepCost) {
	if c.Target > 0 {
		p.costs++
	}
}

// TestSpecPolicy: the engine asks the policy for every step's draft lengths, tells it every
// verification, every step's cost and every finished sequence; a policy that drafts nothing
// leaves decoding as it is without speculation, its steps overlapped.
func TestSpecPolicy(t *testing.T) {
	const vocab = 50
	reqs := fakeRequests(vocab, SamplingParams{})
	run := func(spec *Speculation) (*Engine, [][]result) {
		// Every request is queued before the loop starts, so that no step waits for the
		// next request to arrive (which, on a slow machine, leaves it without a successor
		// to overlap).
		var chans []<-chan Output
		e, _, _ := fakeEngineDraft(t, vocab, Config{Speculation: spec}, false, 2, func(e *Engine) {
			for i, r := range reqs {
				ch, err := e.Generate(context.Background(), r)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				chans = append(chans, ch)
			}
		})
		got := make([][]result, len(reqs))
		for i, ch := range chans {
			got[i] = collect(t, ch, 1)
		}
		waitIdle(t, e)
		// The loop may still be finishing the last step (telling the policy its cost):
		// the policy is read once the loop has ended.
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return e, got
	}
	_, want := run(nil)
	zero := &recordPolicy{}
	e0, got := run(&Speculation{K: 4, Policy: zero})
	for i := range reqs {
		if !slices.Equal(got[i][0].tokens, want[i][0].tokens) {
			t.Errorf("request %d: %v, want %v", i, got[i][0].tokens, want[i][0].tokens)
		}
	}
	// Every step but the last overlaps its successor, as without speculation (no sequence
	// sits a step out to draft).
	if s0 := e0.Stats(); s0.DraftTokens != 0 || e0.overlapped < s0.Steps-2 {
		t.Errorf("policy of no drafts: %d drafts, %d of %d steps overlapped", s0.DraftTokens, e0.overlapped, s0.Steps)
	}
	if zero.calls == 0 || zero.done != len(reqs) || zero.verified != 0 || zero.costs == 0 || zero.maxLenSeen != 4 {
		t.Errorf("policy of no drafts: %+v", zero)
	}
	two := &recordPolicy{k: 2}
	e2, got := run(&Speculation{K: 4, Policy: two})
	for i := range reqs {
		if !slices.Equal(got[i][0].tokens, want[i][0].tokens) {
			t.Errorf("k 2: request %d: %v, want %v", i, got[i][0].tokens, want[i][0].tokens)
		}
	}
	st := e2.Stats()
	if two.verified == 0 || int64(two.verified) != st.SpecDrafts || int64(two.drafted) != st.DraftTokens ||
		int64(two.kept) != st.AcceptedDrafts || two.drafted > 2*two.verified || two.done != len(reqs) {
		t.Errorf("policy of 2 drafts: %+v; stats %d verifications, %d drafts, %d kept", two, st.SpecDrafts, st.DraftTokens, st.AcceptedDrafts)
	}
}
