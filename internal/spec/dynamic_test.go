package spec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/engine"
)

// world is a synthetic serving loop for a policy: batch sequences decode forever, each
// step every one is a candidate that may take up to K drafts, each draft is accepted with
// the sequence's true rate (given the ones before it), and the step costs target(tokens)
// plus draft(passes, draft tokens) seconds, measured with noise.
type world struct {
	batch, k int
	// accept returns sequence i's true acceptance rate at step s.
	accept func(i, s int) float64
	target func(tokens int) float64
	// draft is the draft phase's cost (nil: free, like n-gram lookup); lag, when set,
	// adds each drafting sequence's missed tokens to the draft tokens (a draft model).
	draft func(passes, tokens int) float64
	lag   bool
	// prompt, with lag, is each sequence's prompt, which the draft catches up on before
	// its first draft; the candidates then tell the policy their lag, as the engine does.
	prompt int
	noise  float64
	// verifyTax multiplies the target's cost of a step that verifies drafts (0: 1), as a
	// device's padded or eager verify steps cost more than steps of as many tokens.
	verifyTax float64
	// burst, when set, is a shared machine's load: bursts begin with probability
	// burst.start a step and end with burst.end, and during one every step is measured
	// burst.factor times slower, whatever its kind. The throughput counts the steps'
	// unloaded costs: the work the policy's choices cost.
	burst *burst
	// async is the engine's asynchronous scheduling: a sequence in the step before is in
	// flight (engine.SpecCandidate.SitsOut) unless that step verified drafts (the engine
	// finishes such a step before it plans the next); given drafts in flight, it sits
	// the step out (no token) and is a candidate again in the next.
	async bool
}

// burst is the load of world.burst.
type burst struct{ start, end, factor float64 }

// tax returns the factor of a step's target cost: verifyTax when it verifies drafts.
func (w world) tax(verifies bool) float64 {
	if verifies && w.verifyTax > 0 {
		return w.verifyTax
	}
	return 1
}

// result is what a run produced: tokens per second, and the draft lengths chosen.
type result struct {
	throughput float64
	// meanK is the mean draft length per candidate over the run's last quarter;
	// drafting the fraction of candidate-steps with a draft in it.
	meanK, drafting float64
	lens            [][]int // per step
	// satOut counts the candidate-steps sat out (world.async).
	satOut int
}

// run drives policy p through steps steps of w.
func (w world) run(p engine.SpecPolicy, steps int, seed uint64) result {
	rng := rand.New(rand.NewPCG(seed, 99))
	cands := make([]engine.SpecCandidate, w.batch)
	for i := range cands {
		cands[i] = engine.SpecCandidate{Seq: fmt.Sprintf("seq-%d", i), MaxLen: w.k}
	}
	idle := make([]int, w.batch)
	for i := range idle {
		idle[i] = w.prompt
	}
	inFlight := make([]bool, w.batch)
	var r result
	var tokens, secs float64
	var drafted, candSteps, tailK, tailN float64
	loaded := false
	for s := range steps {
		slow := 1.0
		if w.burst != nil {
			if loaded {
				loaded = rng.Float64() >= w.burst.end
			} else {
				loaded = rng.Float64() < w.burst.start
			}
			if loaded {
				slow = w.burst.factor
			}
		}
		if w.lag && w.prompt > 0 {
			for i := range cands {
				cands[i].Lag = idle[i] + 1
			}
		}
		for i := range cands {
			cands[i].SitsOut = w.async && inFlight[i]
		}
		lens := make([]int, w.batch)
		p.DraftLens(0, cands, lens)
		r.lens = append(r.lens, lens)
		n, passes, draftTokens := w.batch, 0, 0
		for i, k := range lens {
			if k > 0 && cands[i].SitsOut {
				n-- // it sits the step out
				r.satOut++
				continue
			}
			n += k
			passes = max(passes, k)
			candSteps++
			if s >= steps*3/4 {
				tailK += float64(k)
				tailN++
			}
			if k == 0 {
				idle[i]++
				tokens++
				continue
			}
			drafted++
			draftTokens += k
			if w.lag {
				draftTokens += idle[i] + 1
			}
			idle[i] = 0
			kept := 0
			for kept < k && rng.Float64() < w.accept(i, s) {
				kept++
			}
			tokens += float64(kept + 1)
			p.Verified(cands[i].Seq, k, kept)
		}
		jitter := func() float64 { return 1 + w.noise*(2*rng.Float64()-1) }
		tt := w.target(n) * w.tax(passes > 0) * jitter()
		dt := 0.0
		if w.draft != nil && passes > 0 {
			dt = w.draft(passes, draftTokens) * jitter()
		}
		secs += tt + dt
		for i, k := range lens {
			inFlight[i] = w.async && passes == 0 && (k == 0 || !cands[i].SitsOut)
		}
		p.Stepped(engine.StepCost{Tokens: n, VerifyTokens: n - w.batch, Target: dur(slow * tt),
			DraftPasses: passes, DraftTokens: draftTokens, Draft: dur(slow * dt)})
	}
	r.throughput = tokens / secs
	r.meanK = tailK / tailN
	r.drafting = drafted / candSteps
	return r
}

func dur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// fixedBest returns the best expected throughput of a fixed draft length 0..K for a world
// whose every sequence has acceptance a (computed, not simulated), and that length.
func (w world) fixedBest(a float64) (float64, int) {
	best, bestK := 0.0, 0
	for k := 0; k <= w.k; k++ {
		secs := w.target(w.batch*(1+k)) * w.tax(k > 0)
		if w.draft != nil && k > 0 {
			tok := w.batch * k
			if w.lag {
				tok += w.batch
			}
			secs += w.draft(k, tok)
		}
		if tp := float64(w.batch) * expectedTokens(a, k) / secs; tp > best {
			best, bestK = tp, k
		}
	}
	return best, bestK
}

func constant(a float64) func(int, int) float64 { return func(int, int) float64 { return a } }

// gpuStep is an 8B-on-one-GPU-like target step: memory-bound (flat) up to 128 tokens,
// then compute-bound.
func gpuStep(n int) float64 { return 0.004 + 0.00003*math.Max(0, float64(n-128)) }

// cpuStep is a small-model-on-the-CPU-like target step: a multi-token step costs much
// less than as many one-token steps, but every token costs something.
func cpuStep(n int) float64 { return 0.005 + 0.0006*float64(n-1) }

// TestDynamicBacksOffAsBatchGrows: with a draft accepted 70% of the time and a GPU-like
// step cost, the policy speculates fully at batch 1 and stops at batch 256, and is never
// much below the best fixed draft length.
func TestDynamicBacksOffAsBatchGrows(t *testing.T) {
	for _, tc := range []struct {
		batch              int
		minMeanK, maxMeanK float64
	}{
		{1, 3.5, 4}, {8, 3.5, 4}, {32, 1, 4}, {256, 0, 0.1},
	} {
		w := world{batch: tc.batch, k: 4, accept: constant(0.7), target: gpuStep, noise: 0.05}
		r := w.run(NewDynamic(DynamicConfig{MaxLen: 4}), 1500, 1)
		best, bestK := w.fixedBest(0.7)
		plain, _ := world{batch: tc.batch, k: 0, target: gpuStep}.fixedBest(0)
		t.Logf("batch %d: mean k %.2f (best fixed %d), %.0f tok/s; best fixed %.0f, plain %.0f", tc.batch, r.meanK, bestK, r.throughput, best, plain)
		if r.meanK < tc.minMeanK || r.meanK > tc.maxMeanK {
			t.Errorf("batch %d: mean draft length %.2f, want %g..%g", tc.batch, r.meanK, tc.minMeanK, tc.maxMeanK)
		}
		if r.throughput < 0.93*best {
			t.Errorf("batch %d: %.0f tok/s, below 0.93x the best fixed length's %.0f", tc.batch, r.throughput, best)
		}
		if r.throughput < 0.97*plain {
			t.Errorf("batch %d: %.0f tok/s, below 0.97x no speculation's %.0f", tc.batch, r.throughput, plain)
		}
	}
}

// TestDynamicNearZeroAcceptance: a draft that is never right (a random draft model) leads
// to no drafts almost always, the rare probes of one token each, and costs under 3% of
// throughput, at any batch size.
func TestDynamicNearZeroAcceptance(t *testing.T) {
	for _, batch := range []int{1, 8, 32, 128} {
		w := world{batch: batch, k: 4, accept: constant(0), target: cpuStep,
			draft: func(p, tok int) float64 { return 0.0006*float64(p) + 0.00005*float64(tok) }, lag: true, noise: 0.05}
		r := w.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 2000, 2)
		plain, _ := world{batch: batch, k: 0, target: cpuStep}.fixedBest(0)
		if r.drafting > 0.03 {
			t.Errorf("batch %d: %.1f%% of candidate-steps drafted", batch, 100*r.drafting)
		}
		for s, lens := range r.lens[200:] {
			for _, k := range lens {
				if k > 1 {
					t.Fatalf("batch %d, step %d: a draft of %d at acceptance 0", batch, s+200, k)
				}
			}
		}
		if r.throughput < 0.97*plain {
			t.Errorf("batch %d: %.0f tok/s, below 0.97x no speculation's %.0f", batch, r.throughput, plain)
		}
	}
}

// TestDynamicSpeculatesWhenCheapAndAccurate: a nearly always right, free draft on a flat
// step cost takes every draft token it may.
func TestDynamicSpeculatesWhenCheapAndAccurate(t *testing.T) {
	w := world{batch: 4, k: 8, accept: constant(0.97), target: gpuStep, noise: 0.02}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 8}), 600, 3)
	if r.meanK < 7.5 {
		t.Errorf("mean draft length %.2f, want about 8", r.meanK)
	}
}

// TestDynamicWeighsDraftCost: at the same acceptance, a draft whose passes cost as much as
// half a target step is not worth running, one that costs 5% of it is.
func TestDynamicWeighsDraftCost(t *testing.T) {
	for _, tc := range []struct {
		perPass  float64
		min, max float64
	}{{0.5 * cpuStep(1), 0, 0.3}, {0.05 * cpuStep(1), 1, 4}} {
		w := world{batch: 1, k: 4, accept: constant(0.5), target: cpuStep,
			draft: func(p, tok int) float64 { return tc.perPass * float64(p) }, lag: true, noise: 0.03}
		r := w.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 1500, 4)
		best, bestK := w.fixedBest(0.5)
		t.Logf("draft pass %.2g s: mean k %.2f, %.0f tok/s; best fixed k %d, %.0f tok/s", tc.perPass, r.meanK, r.throughput, bestK, best)
		if r.meanK < tc.min || r.meanK > tc.max {
			t.Errorf("draft pass %.2g s: mean draft length %.2f, want %g..%g", tc.perPass, r.meanK, tc.min, tc.max)
		}
		if r.throughput < 0.93*best {
			t.Errorf("draft pass %.2g s: %.0f tok/s, below 0.93x the best fixed length's %.0f", tc.perPass, r.throughput, best)
		}
	}
}

// TestDynamicTrainedPairAtBatchOne: the CPU figures of the trained pair (target ~200
// tok/s, draft ~1,600 tok/s, ~64% agreement) make speculation at batch 1 a clear gain.
func TestDynamicTrainedPairAtBatchOne(t *testing.T) {
	w := world{batch: 1, k: 4, accept: constant(0.64), target: cpuStep,
		draft: func(p, tok int) float64 { return 0.0006*float64(p) + 0.00002*float64(tok) }, lag: true, noise: 0.05}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 1500, 5)
	best, bestK := w.fixedBest(0.64)
	plain, _ := world{batch: 1, k: 0, target: cpuStep}.fixedBest(0)
	t.Logf("mean k %.2f, %.0f tok/s; best fixed k %d %.0f tok/s; plain %.0f tok/s", r.meanK, r.throughput, bestK, best, plain)
	if r.throughput < 0.95*best || r.throughput < 1.3*plain {
		t.Errorf("%.0f tok/s: want >= 0.95x the best fixed length's %.0f and >= 1.3x plain %.0f", r.throughput, best, plain)
	}
}

// TestDynamicLoadBursts: the trained pair at batch 1 on a shared machine, where bursts of
// another process's work (a sixth of the steps, about 7 in a row) make every step 2.5x
// slower while they last. The bursts slow decode and verify steps alike, so the best
// draft length is unchanged; but a burst during a run of verifications makes the verify
// steps' costs look dear against decode steps timed before it (and a burst's end, the
// other way round). Without bursts the policy keeps 0.99x the best fixed length's
// throughput in these worlds; with them 0.88-0.97x (2026-12-03), which this test holds
// it to; the bound to raise once the cost curves tell load from cost (weighing slower
// measurements at a tenth gave 0.92-0.97x, but learns a lasting slow-down ten times
// slower).
func TestDynamicLoadBursts(t *testing.T) {
	w := world{batch: 1, k: 4, accept: constant(0.64), target: cpuStep,
		draft: func(p, tok int) float64 { return 0.0006*float64(p) + 0.00002*float64(tok) }, lag: true, noise: 0.05,
		burst: &burst{start: 0.03, end: 0.15, factor: 2.5}}
	best, bestK := w.fixedBest(0.64)
	plain := 1 / cpuStep(1)
	for seed := uint64(1); seed <= 4; seed++ {
		r := w.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 1500, seed)
		t.Logf("seed %d: mean k %.2f, drafting %.2f, %.0f tok/s; best fixed k %d %.0f tok/s", seed, r.meanK, r.drafting, r.throughput, bestK, best)
		if r.throughput < 0.85*best || r.throughput < 1.15*plain {
			t.Errorf("seed %d: %.0f tok/s, below 0.85x the best fixed length's %.0f (k %d) or 1.15x plain %.0f", seed, r.throughput, best, bestK, plain)
		}
	}
}

// TestDynamicVerifyTax: on a device whose verifying steps cost more than steps of as many
// tokens (padded graph shapes, eager runs: here 2.5x or 1.3x), a 70% acceptance at batch 32
// pays only when the tax is small. The policy learns the tax from its verifications: at
// 2.5x it backs off to within 5% of plain decoding (priced by tokens alone, drafting looks
// like a 1.7x gain and costs 11%), at 1.3x it keeps most of the best fixed length's gain.
func TestDynamicVerifyTax(t *testing.T) {
	for _, c := range []struct {
		tax, want float64 // want: the least throughput, as a fraction of the best fixed length's
	}{{2.5, 0.95}, {1.3, 0.9}} {
		w := world{batch: 32, k: 4, accept: constant(0.7), target: gpuStep, noise: 0.05, verifyTax: c.tax}
		r := w.run(NewDynamic(DynamicConfig{MaxLen: 4}), 2000, 3)
		best, bestK := w.fixedBest(0.7)
		t.Logf("tax %.1f: mean k %.2f, drafting %.2f, %.0f tok/s; best fixed k %d %.0f tok/s", c.tax, r.meanK, r.drafting, r.throughput, bestK, best)
		if r.throughput < c.want*best {
			t.Errorf("tax %.1f: %.0f tok/s, below %.2fx the best fixed length's %.0f (k %d)", c.tax, r.throughput, c.want, best, bestK)
		}
	}
}

// TestDynamicCatchesUpOnPrompt: the trained pair again, but the draft's first phase also
// runs the 128-token prompt, so the first draft measured is many times a later one. The
// policy must not read that phase as the fixed cost of every draft (and stop drafting for
// good): it keeps speculating, within a few percent of the best fixed length.
func TestDynamicCatchesUpOnPrompt(t *testing.T) {
	w := world{batch: 1, k: 4, accept: constant(0.64), target: cpuStep,
		draft: func(p, tok int) float64 { return 0.0006*float64(p) + 0.00002*float64(tok) },
		lag:   true, prompt: 128, noise: 0.05}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 1500, 11)
	best, bestK := w.fixedBest(0.64)
	t.Logf("mean k %.2f, drafting %.2f, %.0f tok/s; best fixed k %d %.0f tok/s", r.meanK, r.drafting, r.throughput, bestK, best)
	if r.throughput < 0.9*best || r.meanK < 2 {
		t.Errorf("%.0f tok/s, mean k %.2f: want >= 0.9x the best fixed length's %.0f and k about %d", r.throughput, r.meanK, best, bestK)
	}
}

// TestDynamicPerSequence: in one batch, sequences whose drafts are right draft and those
// whose drafts are wrong do not.
func TestDynamicPerSequence(t *testing.T) {
	w := world{batch: 8, k: 4, target: cpuStep, noise: 0.03,
		accept: func(i, _ int) float64 {
			if i%2 == 0 {
				return 0.9
			}
			return 0
		}}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 4}), 800, 6)
	var good, bad float64
	for _, lens := range r.lens[400:] {
		for i, k := range lens {
			if i%2 == 0 {
				good += float64(k)
			} else {
				bad += float64(k)
			}
		}
	}
	steps := float64(len(r.lens[400:]) * 4)
	if good/steps < 2 || bad/steps > 0.1 {
		t.Errorf("mean draft length %.2f for the right drafts, %.2f for the wrong ones", good/steps, bad/steps)
	}
}

// TestDynamicRecovers: a sequence whose drafts were wrong for a long time and then turn
// right (a repetitive stretch of text) drafts again soon, through its probes.
func TestDynamicRecovers(t *testing.T) {
	const turn = 600
	w := world{batch: 1, k: 4, target: cpuStep, noise: 0.03,
		accept: func(_, s int) float64 {
			if s < turn {
				return 0
			}
			return 0.9
		}}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 4}), turn+400, 7)
	for s := turn - 100; s < turn; s++ {
		if r.lens[s][0] > 1 {
			t.Fatalf("step %d: drafted %d before the turn", s, r.lens[s][0])
		}
	}
	first := -1
	for s := turn; s < len(r.lens); s++ {
		if r.lens[s][0] >= 3 {
			first = s
			break
		}
	}
	if first < 0 || first > turn+probeMax+50 {
		t.Errorf("full drafts resumed at step %d, want within %d steps of the turn at %d", first, probeMax+50, turn)
	}
	if r.meanK < 3 {
		t.Errorf("mean draft length %.2f at the end, want about 4", r.meanK)
	}
}

// TestDynamicDearProbes: a draft pass costing more than the probe budget ever saves at
// its usual cap (probeCreditSteps steps' share) is still probed, now and then, within
// about probeShare of the time.
func TestDynamicDearProbes(t *testing.T) {
	const steps = 20000
	dear := func(p, _ int) float64 { return 0.05 * float64(p) } // ten target steps a pass
	w := world{batch: 1, k: 4, accept: constant(0), target: cpuStep, draft: dear, noise: 0.03}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 4}), steps, 12)
	probes := 0
	for _, lens := range r.lens[1000:] {
		if lens[0] > 0 {
			probes++
		}
	}
	spent := float64(probes) * dear(1, 1) / (float64(steps-1000) * cpuStep(1))
	t.Logf("%d probes in %d steps: %.2f%% of the time", probes, steps-1000, 100*spent)
	if probes == 0 || spent > 2*probeShare {
		t.Errorf("%d probes, %.2f%% of the time: want some, within about %.0f%%", probes, 100*spent, 100*probeShare)
	}
}

// TestDynamicColdStart: at a cold start of 64 sequences only a few draft while the
// acceptance is unknown: with a draft model that must first run each sequence's 128-token
// prompt and is never right, hardly any sequence pays for that; with drafts that are
// cheap and right, nearly all draft a few steps later.
func TestDynamicColdStart(t *testing.T) {
	wrong := world{batch: 64, k: 4, accept: constant(0), target: gpuStep, lag: true, prompt: 128, noise: 0.03,
		draft: func(p, tok int) float64 { return 0.0003*float64(p) + 0.00001*float64(tok) }}
	r := wrong.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 100, 13)
	drafted, paid := 0, map[int]bool{}
	for s, lens := range r.lens {
		n := 0
		for i, k := range lens {
			if k > 0 {
				n++
				paid[i] = true
			}
		}
		if n > exploreSeqs {
			t.Errorf("step %d: %d of 64 sequences draft, want at most %d", s, n, exploreSeqs)
		}
		drafted += n
	}
	// The explorers draft until exploreVerdicts verdicts are in, then probes come now and
	// then; only the explorers catch up on their prompts.
	if drafted > exploreVerdicts+8 || len(paid) > exploreSeqs {
		t.Errorf("%d drafts by %d sequences in 100 steps of 64 sequences whose drafts are never right", drafted, len(paid))
	}
	right := world{batch: 64, k: 4, accept: constant(0.9), target: gpuStep, noise: 0.03}
	r = right.run(NewDynamic(DynamicConfig{MaxLen: 4}), 20, 14)
	n := 0
	for _, k := range r.lens[10] {
		if k > 0 {
			n++
		}
	}
	if n < 56 {
		t.Errorf("step 10 of drafts right 90%% of the time: %d of 64 sequences draft", n)
	}
}

// TestDynamicCaps: draft lengths stay within each candidate's MaxLen and the policy's
// MaxLen, a candidate that may take none is never probed, and nothing is chosen before a
// step has been measured (except probes, which wait probeBase steps).
func TestDynamicCaps(t *testing.T) {
	d := NewDynamic(DynamicConfig{MaxLen: 3})
	cands := []engine.SpecCandidate{{Seq: "a", MaxLen: 0}, {Seq: "b", MaxLen: 1}, {Seq: "c", MaxLen: 2}, {Seq: "d", MaxLen: 9}}
	lens := make([]int, len(cands))
	d.DraftLens(0, cands, lens)
	for i, k := range lens {
		if k != 0 {
			t.Errorf("before any step: candidate %d drafts %d", i, k)
		}
	}
	for range 50 {
		d.Stepped(engine.StepCost{Tokens: 4, Target: 10 * time.Millisecond})
		d.Stepped(engine.StepCost{Tokens: 12, Target: 10 * time.Millisecond})
	}
	for range 100 {
		for i := range lens {
			lens[i] = -1
		}
		d.DraftLens(3, cands, lens)
		for i, k := range lens {
			if k < 0 || k > min(3, cands[i].MaxLen) {
				t.Fatalf("candidate %d (MaxLen %d): %d drafts", i, cands[i].MaxLen, k)
			}
			d.Verified(cands[i].Seq, k, k)
		}
	}
	if lens[3] != 3 || lens[2] != 2 || lens[1] != 1 || lens[0] != 0 {
		t.Errorf("with free drafts always kept: %v, want [0 1 2 3]", lens)
	}
	d.DraftLens(0, nil, nil)
	for _, c := range cands {
		d.Done(c.Seq)
	}
	if len(d.seqs) != 0 {
		t.Errorf("Done left %d sequences", len(d.seqs))
	}
	d.Verified("e", 0, 0)
	d.Verified("e", 2, 7)
	if st := d.seqs["e"]; st == nil || st.acc.accepted != 2 {
		t.Errorf("a verification keeping more than it drafted counts as %+v", st)
	}
}

// TestDynamicReports: the models' figures are readable for logs and benchmarks.
func TestDynamicReports(t *testing.T) {
	d := NewDynamic(DynamicConfig{MaxLen: 4})
	if d.TargetCost(5) != 0 || d.DraftCost(2, 4) != 0 || d.Acceptance() != globalPrior {
		t.Errorf("new: T %v, D %v, a %g", d.TargetCost(5), d.DraftCost(2, 4), d.Acceptance())
	}
	for range 20 {
		d.Stepped(engine.StepCost{Tokens: 2, Target: 4 * time.Millisecond, DraftPasses: 2, DraftTokens: 3, Draft: time.Millisecond})
		d.Verified("s", 4, 0)
	}
	if got := d.TargetCost(2); got < 3900*time.Microsecond || got > 4100*time.Microsecond {
		t.Errorf("T(2) = %v, want 4ms", got)
	}
	if got := d.DraftCost(2, 3); got < 900*time.Microsecond || got > 1100*time.Microsecond {
		t.Errorf("D(2, 3) = %v, want 1ms", got)
	}
	if a := d.Acceptance(); a > 0.2 {
		t.Errorf("acceptance %g after 20 rejections", a)
	}
}

func TestFixed(t *testing.T) {
	f := Fixed{K: 3}
	cands := []engine.SpecCandidate{{Seq: "a", MaxLen: 0}, {Seq: "b", MaxLen: 2}, {Seq: "c", MaxLen: 5}}
	lens := make([]int, 3)
	f.DraftLens(100, cands, lens)
	if lens[0] != 0 || lens[1] != 2 || lens[2] != 3 {
		t.Errorf("fixed 3: %v", lens)
	}
	f.Verified("a", 1, 0)
	f.Done("a")
	f.Stepped(engine.StepCost{})
}

// BenchmarkDynamicDraftLens times planning one step's draft lengths at batch 256 with
// K = 16, every draft accepted (the longest search): it runs on the engine loop, while the
// previous step computes.
func BenchmarkDynamicDraftLens(b *testing.B) {
	for _, batch := range []int{1, 32, 256} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			d := NewDynamic(DynamicConfig{MaxLen: 16})
			cands := make([]engine.SpecCandidate, batch)
			for i := range cands {
				cands[i] = engine.SpecCandidate{Seq: fmt.Sprint(i), MaxLen: 16}
				d.Verified(cands[i].Seq, 16, 16)
			}
			for n := 1; n <= 8192; n *= 2 {
				d.Stepped(engine.StepCost{Tokens: n, Target: dur(gpuStep(n))})
			}
			lens := make([]int, batch)
			for b.Loop() {
				d.DraftLens(0, cands, lens)
			}
		})
	}
}

// requests is a batch-1 serving loop of short requests: each of n requests is a new
// sequence that produces length tokens after a prompt of prompt tokens, which the draft
// model catches up on before the sequence's first draft (its Lag, as the engine tells
// it, and its Left). Each draft is accepted with probability a given the ones before; the
// target's step and the draft phase cost cpuStep and draft seconds, with 10% noise. It
// returns tokens per second and the verifications made.
func requests(p engine.SpecPolicy, a float64, n, length, prompt int, draft func(passes, tokens int) float64, seed uint64) (float64, int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var tokens, secs float64
	verifs := 0
	for q := range n {
		seq := fmt.Sprintf("request-%d", q)
		idle, out := prompt, 0
		for out < length {
			c := []engine.SpecCandidate{{Seq: seq, MaxLen: max(0, min(4, length-out-1)), Lag: idle + 1, Left: length - out}}
			lens := []int{0}
			p.DraftLens(0, c, lens)
			k, kept, dt, dtok := lens[0], 0, 0.0, 0
			if k > 0 {
				verifs++
				for kept < k && rng.Float64() < a {
					kept++
				}
				p.Verified(seq, k, kept)
				dtok = k + idle + 1
				dt = draft(k, dtok) * (1 + 0.1*(2*rng.Float64()-1))
				idle = 0
			} else {
				idle++
			}
			out += kept + 1
			tokens += float64(kept + 1)
			tt := cpuStep(1+k) * (1 + 0.1*(2*rng.Float64()-1))
			secs += tt + dt
			p.Stepped(engine.StepCost{Tokens: 1 + k, VerifyTokens: k, Target: dur(tt), DraftPasses: k, DraftTokens: dtok, Draft: dur(dt)})
		}
		p.Done(seq)
	}
	return tokens / secs, verifs
}

// TestDynamicShortRequests: batch-1 requests of 64 tokens after 96-token prompts, as
// bench offline runs them, with a draft model whose catch-up on a prompt costs about six
// target steps. With drafts kept 80% of the time the requests draft (within 10% of a
// fixed length of 2) on at least 7 of 8 seeds: the catch-up is spread over the request's
// steps rather than charged to its first draft, which then never looked worth it (every
// seed stayed at plain decoding's speed), and a cold start's first rejections do not stop
// speculation for good (they did on 2 of 8 seeds). The seed that still fails is a cold
// start of 8 one-token verdicts of which more than half were rejections. With drafts
// never kept, the cost stays within 3% of plain decoding on every seed.
func TestDynamicShortRequests(t *testing.T) {
	draft := func(p, tok int) float64 { return 0.0006*float64(p) + 0.0003*float64(tok) }
	plain := 1 / cpuStep(1)
	good := 0
	for seed := uint64(1); seed <= 8; seed++ {
		dyn, v := requests(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 0.8, 8, 64, 96, draft, seed)
		fixed, _ := requests(Fixed{K: 2}, 0.8, 8, 64, 96, draft, seed)
		t.Logf("seed %d, drafts kept 80%%: %.0f tok/s (%d verifications); fixed k=2 %.0f, plain %.0f", seed, dyn, v, fixed, plain)
		if dyn >= 0.9*fixed && dyn >= 1.15*plain {
			good++
		}
		dyn, v = requests(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 0, 8, 64, 96, draft, seed)
		if dyn < 0.97*plain {
			t.Errorf("seed %d, drafts never kept: %.0f tok/s (%d verifications), want >= 0.97x plain %.0f", seed, dyn, v, plain)
		}
	}
	if good < 7 {
		t.Errorf("drafts kept 80%%: %d of 8 seeds within 0.9x fixed k=2 and 1.15x plain, want 7", good)
	}
}

// TestDynamicVerifyCheaperThanPlain: where verifying steps were timed cheaper than plain
// steps (on a shared machine, the two curves' steps ran under different loads: here 0.5x),
// a draft that is never right still is not verified every step: drafts never make a step
// cheaper than the same step without them.
func TestDynamicVerifyCheaperThanPlain(t *testing.T) {
	w := world{batch: 8, k: 4, accept: constant(0), target: cpuStep, noise: 0.05, verifyTax: 0.5,
		draft: func(p, tok int) float64 { return 0.0003*float64(p) + 0.00001*float64(tok) }}
	r := w.run(NewDynamic(DynamicConfig{MaxLen: 4}), 1000, 21)
	t.Logf("drafting %.3f, %.0f tok/s; plain %.0f tok/s", r.drafting, r.throughput, float64(w.batch)/cpuStep(w.batch))
	if r.drafting > 0.05 {
		t.Errorf("drafts never right: %.1f%% of candidate steps draft, want at most 5%%", 100*r.drafting)
	}
}

// TestDynamicAsyncSitOuts: under asynchronous scheduling a sequence given drafts while a
// step decoding it is in flight sits that step out (world.async). A probe granted so, and
// not granted again in the next step, was a token lost for nothing: at batch 8 with a
// draft that is never right, probes came every 8 idle steps, each a sit-out and no
// verification. The policy now charges a probe's sit-out to the probe budget, defers it
// to the step after a verification (which costs none), and runs a probe it sat out for
// in the next step. Speculation with a useless draft stays within 3% of plain decoding,
// and a useful one keeps its gain.
func TestDynamicAsyncSitOuts(t *testing.T) {
	draft := func(p, tok int) float64 { return 0.0006*float64(p) + 0.00002*float64(tok) }
	for _, tc := range []struct {
		batch  int
		accept float64
		want   float64 // the least throughput, as a multiple of plain decoding's
	}{{1, 0, 0.97}, {8, 0, 0.97}, {32, 0, 0.97}, {1, 0.64, 1.3}, {8, 0.64, 0.97}} {
		w := world{batch: tc.batch, k: 4, accept: constant(tc.accept), target: cpuStep, draft: draft, lag: true, noise: 0.05, async: true}
		plain, _ := world{batch: tc.batch, k: 0, target: cpuStep}.fixedBest(0)
		for seed := uint64(1); seed <= 3; seed++ {
			r := w.run(NewDynamic(DynamicConfig{MaxLen: 4, CatchUp: true}), 2000, seed)
			t.Logf("batch %d, acceptance %.2f, seed %d: %.3fx plain, mean k %.2f, drafting %.3f, %d sit-outs", tc.batch, tc.accept, seed, r.throughput/plain, r.meanK, r.drafting, r.satOut)
			if r.throughput < tc.want*plain {
				t.Errorf("batch %d, acceptance %.2f, seed %d: %.3fx plain decoding's throughput, want >= %.2fx", tc.batch, tc.accept, seed, r.throughput/plain, tc.want)
			}
		}
	}
}
