package spec

import (
	"math"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir/internal/engine"
)

// Dynamic is the engine.SpecPolicy of dynamic speculation. For every step it chooses each
// drafting candidate's draft length k (0..MaxLen) to maximize the step's expected tokens
// per second,
//
//	(sum over candidates of E(a_i, k_i)) / (T(tokens) + D(passes, draft tokens)),
//
// where E(a, k) = (1 - a^(k+1)) / (1 - a) is the tokens a verification of k drafts yields
// when each is accepted with probability a, a_i is the candidate's running acceptance
// estimate (acceptance.go), T the target's measured step cost as a function of its tokens
// (the step's other tokens, one per candidate, and the drafts), learnt apart for steps that
// verify drafts and steps that do not, and D the draft phase's (cost.go). Verifying steps
// get a curve of their own because a device may run them otherwise than steps of as many
// tokens (padded to a graph shape with every sequence as long as its longest, eagerly where
// no graph shape fits, with other attention kernels), none of which a token count shows;
// until one is measured, a verifying step is priced as a plain one, so that it is tried.
// A draft model's catch-up on the tokens it has not seen (a whole prompt before a
// sequence's first draft) is spread over the steps the sequence may still draft.
// So speculation backs off by itself when the batch grows (the step leaves the
// memory-bound regime and every draft token costs time) and when a sequence's drafts are
// seldom accepted. A sequence that stops drafting is probed now and then with one draft,
// at intervals that double while probes fail and within a budget of about 1% of the time,
// so that one whose text turns predictable recovers. The engine calls it on its loop; its
// methods are also safe for concurrent use.
type Dynamic struct {
	mu      sync.Mutex
	maxLen  int
	catchUp bool
	target  targetCost // steps that verify no drafts
	verify  targetCost // steps that verify drafts
	draft   draftCost
	global  tally
	// verdicts counts the verifications' verdicts (exploring), without forgetting.
	verdicts int
	seqs     map[string]*seqState
	// credit is the probe budget in seconds, and refused the cost of the dearest probe
	// it could not pay since the last one it paid (see probe).
	credit, refused float64

	// cands is DraftLens's scratch.
	cands []cand
}

// DynamicConfig configures a Dynamic policy.
type DynamicConfig struct {
	// MaxLen is the most draft tokens a sequence takes per step (the configuration's K).
	MaxLen int
	// CatchUp says the draft must first run the tokens of a sequence it has not seen (a
	// separate draft model, which runs only for drafting sequences), so that drafting
	// again after a pause costs more draft tokens; false when a draft costs only its own
	// tokens (ngram; layer_skip, whose draft layers share the target's keys and values).
	CatchUp bool
}

// Tuning of Dynamic.
const (
	// seqDecay is the weight a sequence's earlier verdicts keep per verification (about
	// the last 1/(1-seqDecay) verifications count).
	seqDecay = 0.85
	// seqPriorWeight is the weight, in token verdicts, of the prior a sequence starts
	// from: the acceptance estimate over all sequences.
	seqPriorWeight = 2.0
	// globalDecay, globalPrior and globalPriorWeight are the same for the estimate over
	// all sequences, which starts at globalPrior so that the first sequences try.
	globalDecay       = 0.998
	globalPrior       = 0.5
	globalPriorWeight = 4.0
	// probeBase and probeMax bound the steps a sequence that does not draft waits
	// before it is probed with one draft token; the wait doubles after each probe that
	// is rejected and returns to probeBase when a draft is accepted.
	probeBase = 8
	probeMax  = 128
	// minGain is the least expected gain (accepted tokens) of a draft token considered.
	minGain = 1e-3
	// probeShare is the share of the time probes may take; probeCreditSteps caps the
	// budget saved for them at that many steps' share.
	probeShare       = 0.01
	probeCreditSteps = 256
	// exploreVerdicts and exploreSeqs bound the drafting of a cold start (see exploring).
	exploreVerdicts = 8
	exploreSeqs     = 2
	// lagHorizon is the most steps over which a draft's catch-up is spread (amortized).
	lagHorizon = 16
)

// seqState is what Dynamic keeps of one sequence.
type seqState struct {
	acc tally
	// idle counts the steps planned since the sequence last drafted.
	idle int
	// probeEvery is the idle steps after which it is probed; probing says its last
	// draft was a probe.
	probeEvery int
	probing    bool
	// owed says a probe was paid for while the sequence was in flight: given it, the
	// sequence sat that step out, and the probe runs in the next step it drafts in.
	owed bool
}

// NewDynamic returns a dynamic policy.
func NewDynamic(c DynamicConfig) *Dynamic {
	return &Dynamic{maxLen: c.MaxLen, catchUp: c.CatchUp, seqs: make(map[string]*seqState)}
}

// state returns the state of sequence seq, made when it is new.
func (d *Dynamic) state(seq string) *seqState {
	st := d.seqs[seq]
	if st == nil {
		st = &seqState{probeEvery: probeBase}
		d.seqs[seq] = st
	}
	return st
}

// DraftLens sets lens[i], 0..min(MaxLen, cands[i].MaxLen), for every candidate of the
// step being planned, which holds others other tokens (engine.SpecPolicy).
func (d *Dynamic) DraftLens(others int, cands []engine.SpecCandidate, lens []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(lens[:len(cands)])
	if len(cands) == 0 {
		return
	}
	plan := d.choose(others, cands, lens)
	d.probe(cands, lens, plan)
}

// stepPlan is the shape of the step DraftLens plans: its target tokens (drafts of them
// draft tokens to verify), and its draft phase's passes and tokens.
type stepPlan struct {
	tokens, drafts, passes, draftTokens int
}

// seconds predicts the step's cost. A verifying step is priced by the verify curve but
// never below the same step without its drafts: the two curves are learnt from different
// steps, at different times, and where the verify curve happens to lie below the other
// (its steps timed while a shared machine was less loaded), drafts would look cheaper
// than none, and a draft that is never right would be verified every step.
func (d *Dynamic) seconds(p stepPlan) float64 {
	t := d.target.seconds(p.tokens)
	if p.drafts > 0 && d.verify.known() {
		t = max(d.verify.seconds(p.tokens), d.target.seconds(p.tokens-p.drafts))
	}
	return t + d.draft.seconds(p.passes, p.draftTokens)
}

// choose gives each candidate the drafts whose expected gain is at least a threshold:
// the j-th draft of a candidate with acceptance a gains a^j expected tokens, so for any
// number of draft tokens in all the allocation of the most expected tokens is the one
// above some threshold (up to ties). It tries thresholds on a geometric grid from the
// highest gain down to minGain, then a finer grid around the best, and keeps the one
// whose step yields the most expected tokens per second. With no target step measured
// yet, nobody drafts. It returns the step planned.
func (d *Dynamic) choose(others int, cands []engine.SpecCandidate, lens []int) stepPlan {
	base := stepPlan{tokens: others + len(cands)}
	if !d.target.known() {
		return base
	}
	g := d.global.rate(globalPrior, globalPriorWeight)
	d.cands = d.cands[:0]
	top := 0.0
	for i, c := range cands {
		st := d.state(c.Seq)
		a := st.acc.rate(g, seqPriorWeight)
		limit := min(d.maxLen, c.MaxLen)
		if limit <= 0 || a < minGain {
			continue
		}
		cs := cand{index: i, invLogA: 1 / math.Log(a), limit: limit}
		// cs.gain[k] is the expected tokens that k drafts add: a + ... + a^k.
		term := 1.0
		for k := 1; k <= limit; k++ {
			term *= a
			cs.gain[k] = cs.gain[k-1] + term
		}
		cs.lag = amortized(d.lag(st, c.Lag), c.Left, 1+cs.gain[limit])
		if c.SitsOut {
			cs.sitOut = 1 / horizon(c.Left, 1+cs.gain[limit])
		}
		d.cands = append(d.cands, cs)
		top = max(top, a)
	}
	if len(d.cands) == 0 {
		return base
	}
	num := float64(len(cands))
	// at evaluates the threshold e^logT: the step's expected tokens per second.
	at := func(logT float64) float64 {
		plan, gain := base, 0.0
		for i := range d.cands {
			c := &d.cands[i]
			if k := c.draftsAt(logT); k > 0 {
				gain += c.gain[k] - c.sitOut
				plan.add(c, k)
			}
		}
		return (num + gain) / d.seconds(plan)
	}
	best, bestLog := num/d.seconds(base), math.Inf(1)
	hi, lo := math.Log(top), math.Log(minGain)
	search := func(from, to float64, n int) {
		for m := range n {
			logT := from + (to-from)*float64(m)/float64(n-1)
			if j := at(logT); j > best*(1+1e-9) {
				best, bestLog = j, logT
			}
		}
	}
	const coarse, fine = 24, 12
	search(hi, lo, coarse)
	if !math.IsInf(bestLog, 1) {
		step := (hi - lo) / (coarse - 1)
		search(min(bestLog+step, hi), max(bestLog-step, lo), fine)
	}
	plan, explored, exploring := base, 0, d.exploring()
	for i := range d.cands {
		c := &d.cands[i]
		k := 0
		if !math.IsInf(bestLog, 1) {
			k = c.draftsAt(bestLog)
		}
		if exploring && explored < exploreSeqs {
			k = max(k, 1) // a cold start measures before it judges
		}
		if k > 0 && exploring {
			if explored++; explored > exploreSeqs {
				k = 0 // not this one while the first find out what drafts are worth
			}
		}
		lens[c.index] = k
		if k > 0 {
			plan.add(c, k)
		}
	}
	return plan
}

// add counts k drafts of candidate c into the plan: its target tokens, its draft tokens
// (catching up included) and the draft phase's passes.
func (p *stepPlan) add(c *cand, k int) {
	p.tokens += k
	p.drafts += k
	p.draftTokens += k + c.lag
	p.passes = max(p.passes, k)
}

// exploring reports whether the acceptance over all sequences is still mostly the prior
// (fewer than exploreVerdicts verdicts): a cold start, when every sequence would draft on
// the prior's word and a draft model would catch up on every prompt at once. Then only
// exploreSeqs candidates draft per step, and what they measure decides for the rest; and
// they draft (one token at least) even where the first verdicts made drafting look like a
// loss, so that one or two early rejections (a draft kept 60% of the time misses its
// first two tokens one time in six) do not stop speculation for good on a few verdicts:
// probes, which pay a draft model's catch-up in full, may come too seldom to undo it.
func (d *Dynamic) exploring() bool {
	return d.verdicts < exploreVerdicts
}

// lag returns the tokens the draft must catch up on before a sequence drafts: what the
// engine says (engine.SpecCandidate.Lag), or when it says nothing, an estimate (the one
// since its last draft, and one per step it did not draft); 0 without catching up.
func (d *Dynamic) lag(st *seqState, told int) int {
	switch {
	case !d.catchUp:
		return 0
	case told > 0:
		return told
	}
	return 1 + st.idle
}

// amortized returns the share of lag catch-up tokens that one step of a sequence bears
// in the choice of its drafts: the catch-up is paid once (the whole prompt, at a
// sequence's first draft) and serves every later drafting step, so it is spread over the
// steps the sequence may still draft, its left tokens over perStep expected tokens a
// step, at most lagHorizon of them (left 0: unknown, lagHorizon). Charged whole to the
// first step, a catch-up of a long prompt makes that step look like a loss, and a
// sequence whose drafts would pay never starts drafting.
func amortized(lag, left int, perStep float64) int {
	if lag <= 1 {
		return lag
	}
	return int(math.Ceil(float64(lag) / horizon(left, perStep)))
}

// horizon returns the steps over which a one-off cost of starting to draft is spread: the
// steps a sequence with left tokens to go may still draft at perStep expected tokens a
// step, at most lagHorizon (left 0: unknown, lagHorizon).
func horizon(left int, perStep float64) float64 {
	steps := float64(lagHorizon)
	if left > 0 {
		steps = min(steps, max(1, float64(left)/perStep))
	}
	return steps
}

// probe gives one draft token to candidates left without drafts whose wait is over, as
// far as the probe budget allows: every step adds probeShare of its predicted cost to the
// budget, and a probe takes what it adds to the step (its target token, its draft tokens
// and catching up), so that probing never costs more than about probeShare of the time.
// The budget saves up to probeCreditSteps steps' share, or more when a probe refused
// costs more than that (a dear draft model), so that such a probe is paid in the end,
// only less often.
func (d *Dynamic) probe(cands []engine.SpecCandidate, lens []int, plan stepPlan) {
	share := probeShare * d.seconds(plan)
	d.credit = min(d.credit+share, max(probeCreditSteps*share, d.refused))
	for i, c := range cands {
		st := d.state(c.Seq)
		if st.owed && !c.SitsOut && lens[i] == 0 && min(d.maxLen, c.MaxLen) >= 1 {
			// The probe paid for (and sat out for) in an earlier step.
			plan.add(&cand{lag: d.lag(st, c.Lag)}, 1)
			lens[i], st.idle, st.probing, st.owed = 1, 0, true, false
			continue
		}
		st.owed = false
		if lens[i] > 0 {
			st.idle, st.probing = 0, false
			continue
		}
		if min(d.maxLen, c.MaxLen) < 1 {
			continue
		}
		st.idle++
		if st.idle < st.probeEvery {
			continue
		}
		if c.SitsOut && plan.drafts > 0 {
			// This step verifies, so the engine plans the next once it is done: then
			// the probe costs no sit-out.
			continue
		}
		next := plan
		next.tokens++
		next.drafts++
		next.passes = max(next.passes, 1)
		next.draftTokens += 1 + d.lag(st, c.Lag)
		cost := d.seconds(next) - d.seconds(plan)
		if c.SitsOut {
			// Its token of this step is lost: a token's share of the step.
			cost += d.seconds(plan) / float64(max(plan.tokens, 1))
		}
		if cost > d.credit {
			d.refused = max(d.refused, cost)
			continue
		}
		d.credit -= cost
		d.refused = 0
		plan = next
		lens[i], st.idle, st.probing, st.owed = 1, 0, true, c.SitsOut
	}
}

// Verified learns from a verification: sequence seq drafted n tokens and kept kept of
// them (engine.SpecPolicy).
func (d *Dynamic) Verified(seq string, n, kept int) {
	if n <= 0 {
		return
	}
	kept = min(max(kept, 0), n)
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(seq)
	st.acc.add(n, kept, seqDecay)
	d.global.add(n, kept, globalDecay)
	d.verdicts += kept
	if kept < n {
		d.verdicts++
	}
	switch {
	case kept > 0:
		st.probeEvery = probeBase
	case st.probing:
		st.probeEvery = min(2*st.probeEvery, probeMax)
	}
	st.probing = false
}

// Done forgets a finished sequence (engine.SpecPolicy).
func (d *Dynamic) Done(seq string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.seqs, seq)
}

// Stepped learns a finished step's costs (engine.SpecPolicy).
func (d *Dynamic) Stepped(c engine.StepCost) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.VerifyTokens > 0 {
		d.verify.observe(c.Tokens, c.Target.Seconds())
	} else {
		d.target.observe(c.Tokens, c.Target.Seconds())
	}
	d.draft.observe(c.DraftPasses, c.DraftTokens, c.Draft.Seconds())
}

// Acceptance returns the running per-token acceptance estimate over all sequences (the
// prior a new sequence starts from).
func (d *Dynamic) Acceptance() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.global.rate(globalPrior, globalPriorWeight)
}

// TargetCost returns the modelled cost of a target step of tokens tokens (0 before any
// step is measured).
func (d *Dynamic) TargetCost(tokens int) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return seconds(d.target.seconds(tokens))
}

// DraftCost returns the modelled cost of a draft phase of passes forward passes over
// tokens tokens (0 before any draft phase is measured).
func (d *Dynamic) DraftCost(passes, tokens int) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return seconds(d.draft.seconds(passes, tokens))
}

// seconds converts seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// cand is a candidate of the step being planned: its index among the candidates, one over
// the log of its acceptance estimate, the most drafts it may take, this step's share of the
// tokens its draft must catch up on first (amortized), this step's share of the token it
// loses when drafting makes it sit this step out (engine.SpecCandidate.SitsOut), and
// gain[k], the expected tokens k drafts add.
type cand struct {
	index      int
	invLogA    float64
	limit, lag int
	sitOut     float64
	gain       [engine.MaxSpeculativeTokens + 1]float64
}

// draftsAt returns the drafts the candidate takes at the threshold e^logT: those whose
// expected gain a^j is at least the threshold, at most its limit; none when what they
// gain does not cover the sit-out they cost.
func (c *cand) draftsAt(logT float64) int {
	k := max(min(c.limit, int(logT*c.invLogA+1e-9)), 0)
	if k > 0 && c.gain[k] <= c.sitOut {
		return 0
	}
	return k
}
