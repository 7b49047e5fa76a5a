package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// oracleProposer proposes fakeGreedy's continuation with deliberate mistakes: the draft
// token at offset i is made wrong when bit i of a hash of the context is set and wrong is
// on, so that drafts are kept, cut short and rejected in every pattern.
type oracleProposer struct {
	vocab int
	wrong bool // make some drafts wrong
	junk  bool // propose nothing but wrong tokens
	calls atomic.Int64
}

func (p *oracleProposer) Propose(tokens []int32, n int) []int32 {
	p.calls.Add(1)
	draft := fakeGreedy(p.vocab, tokens, n)
	h := mix(uint64(len(tokens)) ^ uint64(tokens[len(tokens)-1]))
	for i := range draft {
		if p.junk || p.wrong && h>>i&1 == 1 {
			draft[i] = (draft[i] + 1) % int32(p.vocab)
		}
	}
	return draft
}

// fakeRequests are greedy requests of varied prompt lengths, some sharing a 12-token
// prefix (prefix-cache hits), with the output lengths asked.
func fakeRequests(vocab int, params SamplingParams) []Request {
	shared := randomPrompt(99, 12, vocab)
	var reqs []Request
	for i := range 10 {
		prompt := randomPrompt(i+1, 3+5*i, vocab)
		if i%3 == 0 {
			prompt = append(slices.Clone(shared), prompt...)
		}
		p := params
		p.MaxTokens, p.IgnoreEOS = 12+3*i, true
		reqs = append(reqs, Request{PromptTokens: prompt, Params: p})
	}
	return reqs
}

// TestMultiTokenGreedy: with draft tokens proposed (all right, some wrong, all wrong) or
// none, under both scheduling modes, with chunked prefill, prefix hits and preemption
// (a pool too small for all at once), every request gets exactly the tokens of greedy
// decoding one token at a time; the engine's invariants hold after every step and nothing
// is held at the end (fakeEngine's checks).
func TestMultiTokenGreedy(t *testing.T) {
	const vocab = 50
	proposers := map[string]func() *oracleProposer{
		"none":      func() *oracleProposer { return nil },
		"right":     func() *oracleProposer { return &oracleProposer{vocab: vocab} },
		"sometimes": func() *oracleProposer { return &oracleProposer{vocab: vocab, wrong: true} },
		"wrong":     func() *oracleProposer { return &oracleProposer{vocab: vocab, junk: true} },
	}
	for _, pool := range []struct {
		name   string
		blocks int
	}{{"roomy", 257}, {"tight", 30}} {
		for name, mk := range proposers {
			forEachMode(t, func(t *testing.T, serial bool) {
				t.Run(pool.name+"/"+name, func(t *testing.T) {
					cfg := Config{NumBlocks: pool.blocks, DisableAsyncScheduling: serial,
						SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 24}}
					prop := mk()
					if prop != nil {
						cfg.Speculation = specWith(prop, 4)
					}
					e, _ := fakeEngine(t, vocab, cfg, false)
					reqs := fakeRequests(vocab, SamplingParams{})
					got := generate(t, e, reqs)
					for i, r := range reqs {
						want := fakeGreedy(vocab, r.PromptTokens, r.Params.MaxTokens)
						if !slices.Equal(got[i][0].tokens, want) {
							t.Errorf("request %d: %v, want %v", i, got[i][0].tokens, want)
						}
						if got[i][0].usage.CompletionTokens != len(want) {
							t.Errorf("request %d: usage %+v", i, got[i][0].usage)
						}
					}
					st := e.Stats()
					if pool.name == "tight" && st.Preemptions == 0 {
						t.Errorf("no preemption in a %d-block pool", pool.blocks)
					}
					if prop != nil && prop.calls.Load() == 0 {
						t.Error("the proposer was never asked")
					}
				})
			})
		}
	}
}

// TestMultiTokenSteps: a right proposer makes a lone request take several tokens a step
// (fewer forward passes than tokens, several logits rows a step), and a wrong one costs
// only compute.
func TestMultiTokenSteps(t *testing.T) {
	const vocab, n = 50, 40
	prompt := randomPrompt(5, 8, vocab)
	steps := func(p *oracleProposer) (int64, int64, Stats) {
		cfg := Config{}
		if p != nil {
			cfg.Speculation = specWith(p, 4)
		}
		e, fm := fakeEngine(t, vocab, cfg, false)
		got := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: n, IgnoreEOS: true}}})
		if want := fakeGreedy(vocab, prompt, n); !slices.Equal(got[0][0].tokens, want) {
			t.Fatalf("tokens %v, want %v", got[0][0].tokens, want)
		}
		waitIdle(t, e)
		return fm.steps.Load(), fm.rows.Load(), e.Stats()
	}
	plainSteps, _, _ := steps(nil)
	rightSteps, rightRows, right := steps(&oracleProposer{vocab: vocab})
	wrongSteps, wrongRows, wrong := steps(&oracleProposer{vocab: vocab, junk: true})
	if right.DraftTokens == 0 || right.AcceptedDrafts != right.DraftTokens || wrong.DraftTokens == 0 || wrong.AcceptedDrafts != 0 {
		t.Errorf("draft stats: right %d of %d kept, wrong %d of %d", right.AcceptedDrafts, right.DraftTokens, wrong.AcceptedDrafts, wrong.DraftTokens)
	}
	if plainSteps != n {
		t.Errorf("plain decoding took %d steps for %d tokens", plainSteps, n)
	}
	// 1 prefill step, then 5 tokens a step.
	if rightSteps > 1+(n+4)/5 {
		t.Errorf("right drafts: %d steps for %d tokens, want at most %d", rightSteps, n, 1+(n+4)/5)
	}
	if rightRows <= rightSteps {
		t.Errorf("right drafts: %d logits rows in %d steps", rightRows, rightSteps)
	}
	if wrongSteps != plainSteps || wrongRows <= wrongSteps {
		t.Errorf("wrong drafts: %d steps, %d rows; plain %d steps", wrongSteps, wrongRows, plainSteps)
	}
}

// TestMultiTokenSampling: drafts do not change what a seeded request samples. On the host
// each row's draw is the one the next token would have used, so the tokens equal those
// without drafts; where the device samples (canSample), a verification step draws once per
// row on either side, so a request's tokens do not depend on what it is batched with.
func TestMultiTokenSampling(t *testing.T) {
	const vocab = 50
	seed := uint64(11)
	params := SamplingParams{Temperature: 0.8, TopK: 20, Seed: &seed, MaxTokens: 30, IgnoreEOS: true}
	prompt := randomPrompt(3, 10, vocab)
	run := func(p Proposer, canSample bool, company bool) []int32 {
		e, _ := fakeEngine(t, vocab, Config{Speculation: specWith(p, 3)}, canSample)
		reqs := []Request{{PromptTokens: prompt, Params: params}}
		if company {
			lp := params
			lp.Logprobs, lp.Seed = true, nil
			reqs = append(reqs, Request{PromptTokens: randomPrompt(4, 6, vocab), Params: lp})
		}
		return generate(t, e, reqs)[0][0].tokens
	}
	host := run(nil, false, false)
	if got := run(&oracleProposer{vocab: vocab, wrong: true}, false, false); !slices.Equal(got, host) {
		t.Errorf("host sampling with drafts %v, without %v", got, host)
	}
	alone := run(&oracleProposer{vocab: vocab, wrong: true}, true, false)
	if batched := run(&oracleProposer{vocab: vocab, wrong: true}, true, true); !slices.Equal(alone, batched) {
		t.Errorf("device sampling with drafts: alone %v, batched with a logprobs request %v", alone, batched)
	}
}

// TestMultiTokenStops: a stop token inside a run of kept drafts ends the choice there,
// and max_tokens caps the drafts; usage counts only the tokens sent.
func TestMultiTokenStops(t *testing.T) {
	const vocab = 50
	prompt := randomPrompt(8, 6, vocab)
	ref := fakeGreedy(vocab, prompt, 30)
	stop := ref[13]
	want := fakeGreedy(vocab, prompt, 30, stop)
	forEachMode(t, func(t *testing.T, serial bool) {
		e, _ := fakeEngine(t, vocab, Config{Speculation: specWith(&oracleProposer{vocab: vocab}, 5), DisableAsyncScheduling: serial}, false)
		got := generate(t, e, []Request{
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 30, StopTokenIDs: []int32{stop}}},
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 7}},
		})
		if r := got[0][0]; !slices.Equal(r.tokens, want) || r.finish != FinishStop || r.usage.CompletionTokens != len(want) {
			t.Errorf("stop token %d: %v (%s, usage %+v), want %v", stop, r.tokens, r.finish, r.usage, want)
		}
		if r := got[1][0]; !slices.Equal(r.tokens, ref[:7]) || r.finish != FinishLength {
			t.Errorf("max_tokens 7: %v (%s), want %v", r.tokens, r.finish, ref[:7])
		}
	})
}

func (p *oracleProposer) String() string {
	return fmt.Sprintf("oracle(wrong=%v junk=%v)", p.wrong, p.junk)
}

// specWith is speculation with proposer p and at most k drafts (nil for a nil p).
func specWith(p Proposer, k int) *Speculation {
	if p == nil {
		return nil
	}
	return &Speculation{K: k, Proposer: p}
}

// firstSeqPolicy gives full drafts to the first request's sequence only, as a dynamic
// policy does to a sequence whose drafts are right beside others whose drafts are not.
type firstSeqPolicy struct{}

func (firstSeqPolicy) DraftLens(_ int, cands []SpecCandidate, lens []int) {
	for i, c := range cands {
		if strings.HasPrefix(c.Seq, "req-1#") {
			lens[i] = c.MaxLen
		}
	}
}
func (firstSeqPolicy) Verified(string, int, int) {}
func (firstSeqPolicy) Done(string)               {}
func (firstSeqPolicy) Stepped(StepCost)          {}

// TestVerifyKeepsBatchWhole: with async scheduling, a sequence whose drafts are always
// right verifies in every step while another decodes beside it without drafts, rather than
// sitting out every other step (the step after a verification is planned only once it is
// done): 80 tokens in 4-token verifications beside a 20-token request take about 21 steps,
// not the ~30 of drafting every other step while the other runs.
func TestVerifyKeepsBatchWhole(t *testing.T) {
	const vocab = 50
	a, b := randomPrompt(21, 6, vocab), randomPrompt(22, 6, vocab)
	sp := &Speculation{K: 3, Proposer: &oracleProposer{vocab: vocab}, Policy: firstSeqPolicy{}}
	e, fm := fakeEngine(t, vocab, Config{Speculation: sp}, false)
	got := generateTogether(t, e, []Request{
		{PromptTokens: a, Params: SamplingParams{MaxTokens: 80, IgnoreEOS: true}},
		{PromptTokens: b, Params: SamplingParams{MaxTokens: 20, IgnoreEOS: true}},
	})
	if !slices.Equal(got[0][0].tokens, fakeGreedy(vocab, a, 80)) || !slices.Equal(got[1][0].tokens, fakeGreedy(vocab, b, 20)) {
		t.Fatal("wrong tokens")
	}
	if steps := fm.steps.Load(); steps > 24 {
		t.Errorf("%d steps, want about 21 (80 tokens in verifications of 4 beside 20 decoded)", steps)
	}
}

// emptyProposer never proposes anything (n-gram lookup on text without repeats).
type emptyProposer struct{ calls atomic.Int64 }

func (p *emptyProposer) Propose(tokens []int32, n int) []int32 {
	p.calls.Add(1)
	return nil
}

// TestEmptyProposalsKeepBatchWhole: under asynchronous scheduling a sequence that is to
// draft sits a step out (its drafts follow its last token); when the proposer keeps
// finding nothing, the engine stops asking it for a while (backing off to 16 steps), so
// that four sequences decoding 40 tokens take about the steps of plain decoding rather
// than, when the steps overlap, every other step each (before: 152 proposals and 40 or
// 80 steps, by timing).
func TestEmptyProposalsKeepBatchWhole(t *testing.T) {
	const vocab = 50
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{PromptTokens: randomPrompt(30+i, 6, vocab), Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true}})
	}
	p := &emptyProposer{}
	e, fm := fakeEngine(t, vocab, Config{Speculation: &Speculation{K: 3, Proposer: p}}, false)
	got := generateTogether(t, e, reqs)
	for i, r := range reqs {
		if !slices.Equal(got[i][0].tokens, fakeGreedy(vocab, r.PromptTokens, 40)) {
			t.Fatalf("request %d: wrong tokens", i)
		}
	}
	steps, calls := fm.steps.Load(), p.calls.Load()
	if steps > 48 || calls > 32 {
		t.Errorf("%d steps and %d proposals, want about 41 steps (one prefill, 40 decode steps) and 24 proposals (6 a sequence)", steps, calls)
	}
}

// recordingPolicy drafts K for every candidate, as a policy on the prior's word does, and
// records what it is told.
type recordingPolicy struct {
	mu       sync.Mutex
	verified map[[2]int]int // (n, kept) -> calls
	sitsOut  int            // candidates told they would sit out
}

func (p *recordingPolicy) DraftLens(_ int, cands []SpecCandidate, lens []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range cands {
		lens[i] = c.MaxLen
		if c.SitsOut {
			p.sitsOut++
		}
	}
}
func (p *recordingPolicy) Verified(_ string, n, kept int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.verified[[2]int{n, kept}]++
}
func (*recordingPolicy) Done(string)      {}
func (*recordingPolicy) Stepped(StepCost) {}

// TestEmptyProposalsTellPolicy: a proposer's empty proposal for a sequence the policy gave
// drafts reaches the policy as one draft not kept, so that a policy exploring until it has
// verdicts (a dynamic one's cold start) is not left asking for drafts that never come,
// each of which made the sequence sit a step out; and candidates in flight are marked as
// sitting out if they draft.
func TestEmptyProposalsTellPolicy(t *testing.T) {
	const vocab = 50
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{PromptTokens: randomPrompt(40+i, 6, vocab), Params: SamplingParams{MaxTokens: 24, IgnoreEOS: true}})
	}
	p := &emptyProposer{}
	pol := &recordingPolicy{verified: map[[2]int]int{}}
	e, _ := fakeEngine(t, vocab, Config{Speculation: &Speculation{K: 3, Proposer: p, Policy: pol}}, false)
	got := generateTogether(t, e, reqs)
	for i, r := range reqs {
		if !slices.Equal(got[i][0].tokens, fakeGreedy(vocab, r.PromptTokens, 24)) {
			t.Fatalf("request %d: wrong tokens", i)
		}
	}
	pol.mu.Lock()
	defer pol.mu.Unlock()
	if calls := p.calls.Load(); calls == 0 || int64(pol.verified[[2]int{1, 0}]) != calls || len(pol.verified) != 1 {
		t.Errorf("%d empty proposals, the policy told %v; want each as one draft not kept", calls, pol.verified)
	}
	if pol.sitsOut == 0 {
		t.Error("no candidate was marked as sitting out under async scheduling")
	}
}

// costPolicy drafts nothing and records the steps' costs.
type costPolicy struct {
	mu    sync.Mutex
	costs []StepCost
}

func (*costPolicy) DraftLens(int, []SpecCandidate, []int) {}
func (*costPolicy) Verified(string, int, int)             {}
func (*costPolicy) Done(string)                           {}
func (p *costPolicy) Stepped(c StepCost) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.costs = append(p.costs, c)
}

// TestStepClock: the policy's step costs are read on Config.StepClock when one is given
// (the CPU's process time): a clock that advances 3 ms a reading makes every forward pass
// cost 3 ms.
func TestStepClock(t *testing.T) {
	const vocab = 50
	var ticks atomic.Int64
	clock := func() time.Duration { return time.Duration(ticks.Add(1)) * 3 * time.Millisecond }
	pol := &costPolicy{}
	e, _ := fakeEngine(t, vocab, Config{Speculation: &Speculation{K: 2, Proposer: &emptyProposer{}, Policy: pol}, StepClock: clock}, false)
	prompt := randomPrompt(50, 6, vocab)
	if got := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 6, IgnoreEOS: true}}}); !slices.Equal(got[0][0].tokens, fakeGreedy(vocab, prompt, 6)) {
		t.Fatal("wrong tokens")
	}
	pol.mu.Lock()
	defer pol.mu.Unlock()
	if len(pol.costs) == 0 {
		t.Fatal("no step reported")
	}
	for _, c := range pol.costs {
		if c.Target != 3*time.Millisecond {
			t.Errorf("step of %d tokens cost %v on the step clock, want 3ms", c.Tokens, c.Target)
		}
	}
}
