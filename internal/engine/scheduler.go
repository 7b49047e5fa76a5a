package engine

import (
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/lora"
)

// SchedulerConfig are the scheduler's limits.
type SchedulerConfig struct {
	// MaxNumSeqs caps the running sequences.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step.
	MaxNumBatchedTokens int
	// DisableChunkedPrefill makes a prompt wait until its whole remainder fits the step's
	// budget (a prompt longer than the budget still runs in chunks when alone).
	DisableChunkedPrefill bool
	// MaxLoRAs caps the distinct LoRA adapters of the running sequences, so that a step
	// never needs more than the model's adapter slots (0: no cap). A waiting sequence
	// of another adapter waits until one of them finishes (vLLM's max_loras).
	MaxLoRAs int
}

// scheduled is one sequence's share of a step: numNew tokens from position start on, the
// last numDraft of them draft tokens to verify, with the logits of the tokens at offsets
// rows (0..numNew-1, ascending) returned.
type scheduled struct {
	seq *sequence
	// start is seq.numComputed when the step was scheduled (the scheduler advances
	// numComputed past the step at once, so that the next step can be planned while this
	// one runs).
	start    int
	numNew   int
	numDraft int
	// rows are the offsets of the tokens whose logits the step returns: prompt tokens
	// scored for prompt logprobs first, then, when the step samples, the numDraft+1
	// sampling rows (the token before each draft token, whose row verifies it, and the
	// last token). Prefill chunks before the last may have none.
	rows []int
	// sampling is whether the step ends at the sequence's last token, so that it samples
	// the sequence's next token (after verifying its drafts).
	sampling bool
	// stale marks a sampling entry that no longer ends at the sequence's last token when
	// the step is launched: jump-forward appended tokens after the token it computes (see
	// Engine.jumpForward). The step still computes that token; its sample is ignored.
	stale bool
	// dropped is seq.dropped for the step: its tokens sit at cache index p-dropped.
	dropped int
	// shifts rotate the keys the sequence's KV policy moved, in order, before the step
	// runs.
	shifts []keyShift
	// mass, when set, receives the attention mass of the step's tokens from the
	// massFrom-th on, for the sequence's policy; massEpoch is seq.massEpoch then.
	mass                []float32
	massFrom, massEpoch int
}

// numSampling returns the number of the entry's last rows that verify drafts or sample.
func (sc *scheduled) numSampling() int {
	if !sc.sampling {
		return 0
	}
	return sc.numDraft + 1
}

// stepPlan is the scheduler's decision for one step.
type stepPlan struct {
	seqs      []scheduled
	numTokens int
	preempted int
	// writes import blocks a KVStore found into the cache before the step runs.
	writes []blockWrite
}

// scheduler is the vLLM v1 style token-budget scheduler. It has no prefill or decode phase:
// each sequence has numComputed of length() tokens in the cache, and every step hands the
// budget to running sequences first (decodes and unfinished prompt chunks alike), then to
// waiting ones in priority and arrival order. When the KV pool runs out, the last running
// sequence in that order (lowest priority, newest) is preempted: its blocks are freed and it
// waits to be recomputed, prefix-cache hits included. Since a request that cannot fit alone
// is refused at submission, the first sequence in order always progresses: no livelock.
//
// A step may be scheduled while the previous one still runs (asynchronous scheduling): a
// sequence's numComputed already counts the tokens of the step in flight, and its length
// counts the token that step is sampling for it (pending), whose value the runner fills in
// before the new step starts.
//
// A decoding sequence may carry draft tokens (speculative decoding, from the proposer):
// its share of the step is its last token and the drafts, with a logits row for each, and
// after the step the engine keeps the drafts the model agrees with and rolls the rest
// back. Until that is known the sequence sits out the steps planned, so a drafting
// sequence does not overlap its own steps; the engine therefore plans the step after a
// verification only once the verification is done (see Engine.step), so that the batch
// stays whole. Imported KV fits as
// numComputed set from outside before admission.
type scheduler struct {
	cfg SchedulerConfig
	kv  *kvcache.Manager
	// maxModelLen is the engine's cap on a sequence's tokens (a sequence that reaches it
	// finishes).
	maxModelLen int
	// vocab is the model's vocabulary size (draft tokens must be inside it).
	vocab int
	// massShape is ModelInfo's MassLanes and MassHeads: the rows of a step's attention
	// mass.
	massShape massShape
	// spec, when set, configures speculative decoding (draft tokens for decoding
	// sequences).
	spec *Speculation
	// scoreChunk caps the tokens of a prefill chunk whose every row returns logits (a
	// prompt-logprobs request), bounding the logits a step copies back.
	scoreChunk int
	// poolsEveryRow is a mean-pooling engine's: every prompt row's hidden state comes
	// back, and no prefix hit is taken (see pooling.go). waitsForShared is a last-token
	// pooling engine's with prefix caching: a prompt whose first block the step being
	// planned computes for another waits a step to take it from the cache (sharesFresh).
	poolsEveryRow, waitsForShared bool
	waiting                       []*sequence // sorted by before
	running                       []*sequence // sorted by before

	preemptions         int64
	prefixQueries, hits int64
}

// insertSorted inserts s into q keeping the before order.
func insertSorted(q []*sequence, s *sequence) []*sequence {
	i, _ := slices.BinarySearchFunc(q, s, func(a, b *sequence) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
	return slices.Insert(q, i, s)
}

// remove deletes s from q, reporting whether it was there.
func remove(q []*sequence, s *sequence) ([]*sequence, bool) {
	i := slices.Index(q, s)
	if i < 0 {
		return q, false
	}
	return slices.Delete(q, i, i+1), true
}

// add queues a new sequence.
func (s *scheduler) add(seq *sequence) {
	seq.status = statusWaiting
	s.waiting = insertSorted(s.waiting, seq)
}

// addRunning puts a sequence that already holds blocks (a forked choice) into the running set.
func (s *scheduler) addRunning(seq *sequence) {
	seq.status = statusRunning
	s.running = insertSorted(s.running, seq)
}

// finish removes a sequence from the queues and frees its blocks.
func (s *scheduler) finish(seq *sequence) {
	s.running, _ = remove(s.running, seq)
	s.waiting, _ = remove(s.waiting, seq)
	s.kv.Free(seq.id)
	seq.status = statusFinished
}

// runningSlots is the number of max-num-seqs slots the running sequences take in the step
// being planned; a sequence sure to finish after the step in flight takes none (it sits
// this step out and is gone by the next).
func (s *scheduler) runningSlots() int {
	n := 0
	for _, r := range s.running {
		if !s.finishing(r) {
			n += r.slots()
		}
	}
	return n
}

// preempt frees a running sequence's blocks and queues it for recomputation. A sequence
// in a step still in flight keeps its pending token: it arrives, is appended as usual, and
// the sequence is recomputed with it (admission waits for it, see schedule).
func (s *scheduler) preempt(seq *sequence) {
	s.running, _ = remove(s.running, seq)
	s.kv.Free(seq.id)
	seq.numComputed, seq.dropped = 0, 0
	seq.mass, seq.massPending = newMassState(seq.req.policy, s.massShape), false
	seq.massEpoch++
	if seq.pending == 0 {
		// Drafts proposed for the step being planned: it will not run them. (A step in
		// flight keeps its drafts until its result is taken.)
		seq.draft, seq.draftByModel = nil, false
	}
	// The draft model's cache lost the sequence's blocks too.
	seq.draftComputed = 0
	s.add(seq)
	s.preemptions++
}

// sitsOut reports whether a running sequence skips the step being planned because the step
// in flight decides its fate: it is sampling its first token before forking (its children
// are made from its state after that token, and they and it run from the step after), it
// is a beam (whether it lives on is known only then), it verifies drafts (how many it keeps
// is known only then) or is to draft (its drafts follow tokens that must all be known), or
// it is finishing. A beam also sits out while its siblings catch up, and a sequence whose
// KV policy ranks its cache by attention mass while a step collecting that mass runs.
func (s *scheduler) sitsOut(seq *sequence) bool {
	if seq.beam != nil && seq.beam.ready || seq.massPending {
		return true
	}
	return seq.pending > 0 && (seq.forkPending || seq.beam != nil || len(seq.draft) > 0 || seq.wantsDraft) || s.finishing(seq)
}

// drafts reports whether seq decodes with draft tokens: the engine has a proposer and seq
// is not a beam. A sequence whose processors mask the vocabulary (structured output) drafts
// only with a proposer: a draft model or draft layers make their drafts inside the step, on
// the forward goroutine, after the loop computed the masks of the step's rows, and a draft
// row's mask depends on the drafts before it.
func (s *scheduler) drafts(seq *sequence) bool {
	return s.spec != nil && seq.beam == nil && !seq.req.policy.Drops() && (s.spec.Proposer != nil || len(seq.maskers) == 0)
}

// finishing reports whether the token a step in flight samples for seq brings it to
// max_tokens or the context length: it is sure to finish, and a step for it would be
// wasted.
func (s *scheduler) finishing(seq *sequence) bool {
	return seq.pending > 0 && (seq.length()-seq.numPrompt >= seq.req.maxTokens || seq.length() >= seq.req.maxLen)
}

// canDraft reports whether seq may verify drafts in the step being planned: it drafts, its
// tokens are all known and all but the last computed, and it samples token by token (no
// fork pending).
func (s *scheduler) canDraft(seq *sequence) bool {
	return s.decodes(seq) && seq.pending == 0
}

// decodes reports whether seq is decoding token by token (all but its last token computed,
// or about to be once the step in flight has run) with drafting possible: a candidate of
// the speculation policy.
func (s *scheduler) decodes(seq *sequence) bool {
	return s.drafts(seq) && seq.numComputed == len(seq.tokens)+seq.pending-1 && !seq.forkPending && len(seq.draft) == 0
}

// draftRoom is the most draft tokens seq may take in a step with budget tokens left:
// Speculation.K, fewer when max_tokens, the context length or the budget leave less.
func (s *scheduler) draftRoom(seq *sequence, budget int) int {
	return max(0, min(s.spec.K, seq.req.maxTokens-seq.numOutput()-1, s.maxModelLen-len(seq.tokens)-1, budget-1))
}

// draftLens asks the policy how many drafts each decoding sequence takes in the step being
// planned (Speculation.K, capped by its room, without a policy), and returns them by
// sequence. A sequence the policy gives drafts while a step decoding it is in flight cannot
// draft now (its last token is not known yet): it is marked to sit this step out and draft
// in the next.
func (s *scheduler) draftLens() map[*sequence]int {
	if s.spec == nil {
		return nil
	}
	var cands []SpecCandidate
	var seqs []*sequence
	others := 0
	for _, seq := range s.running {
		seq.wantsDraft = false
		if s.sitsOut(seq) {
			continue
		}
		if !s.decodes(seq) {
			others += min(seq.length()-seq.numComputed, s.cfg.MaxNumBatchedTokens)
			continue
		}
		if seq.proposeWait > 0 {
			seq.proposeWait--
			others++ // its one token
			continue
		}
		if room := s.draftRoom(seq, s.cfg.MaxNumBatchedTokens); room > 0 {
			left := min(seq.req.maxTokens-seq.numOutput(), s.maxModelLen-len(seq.tokens))
			cands = append(cands, SpecCandidate{Seq: string(seq.id), MaxLen: room, Lag: s.draftLag(seq), Left: left, SitsOut: seq.pending > 0})
			seqs = append(seqs, seq)
		} else {
			others++ // its one token
		}
	}
	lens := make([]int, len(cands))
	if s.spec.Policy != nil {
		s.spec.Policy.DraftLens(others, cands, lens)
	} else {
		for i, c := range cands {
			lens[i] = c.MaxLen
		}
	}
	out := make(map[*sequence]int, len(seqs))
	for i, seq := range seqs {
		k := max(0, min(lens[i], cands[i].MaxLen))
		out[seq] = k
		seq.wantsDraft = k > 0 && seq.pending > 0
	}
	return out
}

// draftLag is the number of tokens the draft model catches up on before seq drafts (see
// SpecCandidate.Lag).
func (s *scheduler) draftLag(seq *sequence) int {
	switch {
	case s.spec.Proposer != nil:
		return 0
	case s.spec.DraftLayers > 0:
		return 1
	}
	return len(seq.tokens) + seq.pending - seq.draftComputed
}

// propose gives seq its draft tokens for the step being planned, at most want of them and
// no more than the budget left allows: the proposer's tokens (cut at the first id outside
// the vocabulary), or placeholders that the step's draft phase fills with a draft model.
func (s *scheduler) propose(seq *sequence, want, budget int) []int32 {
	seq.draftByModel, seq.draftDists = false, nil
	if want <= 0 || !s.canDraft(seq) {
		return nil
	}
	k := min(want, s.draftRoom(seq, budget))
	if k <= 0 {
		return nil
	}
	if s.spec.Proposer == nil {
		seq.draftByModel = true
		return make([]int32, k)
	}
	draft := s.spec.Proposer.Propose(seq.tokens, k)
	draft = draft[:min(len(draft), k)]
	if len(draft) == 0 {
		seq.proposeMisses++
		seq.proposeWait = 1 << min(seq.proposeMisses-1, 4)
		if s.spec.Policy != nil {
			// The policy asked for drafts that did not come (and the sequence may
			// have sat a step out for them): for its estimate, a draft not kept.
			s.spec.Policy.Verified(string(seq.id), 1, 0)
		}
	} else {
		seq.proposeMisses = 0
	}
	for i, t := range draft {
		if t < 0 || int(t) >= s.vocab {
			return slices.Clone(draft[:i])
		}
	}
	return slices.Clone(draft)
}

// schedule plans the next step and advances the numComputed of the sequences it takes
// past it; a sequence that will sample in the step gets a pending sampling.
func (s *scheduler) schedule() (stepPlan, error) {
	var plan stepPlan
	budget := s.cfg.MaxNumBatchedTokens
	take := func(seq *sequence, numNew int, shifts []keyShift) {
		start, end := seq.numComputed, seq.numComputed+numNew
		sc := scheduled{seq: seq, start: start, numNew: numNew, numDraft: len(seq.draft), sampling: end == seq.length(),
			dropped: seq.dropped, shifts: shifts}
		if seq.mass != nil {
			sc.mass, sc.massFrom, sc.massEpoch = make([]float32, seq.mass.size(end-seq.dropped)), seq.mass.from(numNew), seq.massEpoch
			seq.massPending = true
		}
		if r := seq.req; r.wantsPromptLogprobs() {
			// Rows that score prompt tokens not scored yet (a recomputed prompt is not
			// scored twice): the row of position p predicts prompt token p+1.
			for p := max(start, len(r.promptLPs)); p < min(end, seq.numPrompt-1); p++ {
				sc.rows = append(sc.rows, p-start)
			}
		}
		if s.poolsEveryRow {
			// The rows of prompt positions not pooled yet, but the last, which the
			// sampling row below is.
			for p := max(start, seq.poolCount); p < min(end, seq.numPrompt-1); p++ {
				sc.rows = append(sc.rows, p-start)
			}
		}
		if sc.sampling {
			for p := end - 1 - sc.numDraft; p < end; p++ {
				sc.rows = append(sc.rows, p-start)
			}
			seq.pending++
		}
		plan.seqs = append(plan.seqs, sc)
		seq.req.peakBlocks = max(seq.req.peakBlocks, s.kv.NumBlocksOf(seq.id))
		plan.numTokens += numNew
		budget -= numNew
		seq.numComputed = end
	}
	// chunk caps a prefill chunk whose rows all return logits.
	chunk := func(seq *sequence, numNew int) int {
		if seq.req.wantsPromptLogprobs() {
			return min(numNew, max(s.scoreChunk, 1))
		}
		return numNew
	}

	// Running sequences first, in order; victims come from the end of the list, which
	// holds sequences not yet scheduled this step (or the current one itself).
	lens := s.draftLens()
	for i := 0; i < len(s.running) && budget > 0; {
		seq := s.running[i]
		if s.sitsOut(seq) {
			i++
			continue
		}
		seq.draft = s.propose(seq, lens[seq], budget)
		numNew := chunk(seq, min(seq.length()-seq.numComputed, budget))
		if numNew <= 0 {
			return plan, fmt.Errorf("engine: running sequence %q has nothing to compute (%d of %d tokens)", seq.id, seq.numComputed, seq.length())
		}
		self := false
		var shifts []keyShift
		for {
			room, sh, ok, err := s.fitPolicy(seq, numNew, slices.ContainsFunc(shifts, func(k keyShift) bool { return k.compact != nil }))
			if err != nil {
				return plan, fmt.Errorf("engine: schedule %q: %w", seq.id, err)
			}
			if ok {
				if sh != nil {
					shifts = append(shifts, *sh)
				}
				numNew = room
				ok, err = s.kv.Allocate(seq.id, kvcache.Alloc{NumComputed: seq.numComputed - seq.dropped, NumNew: numNew})
			}
			if err != nil {
				return plan, fmt.Errorf("engine: schedule %q: %w", seq.id, err)
			}
			if ok {
				break
			}
			if len(seq.draft) > 0 {
				// Verifying drafts is not worth a preemption: decode plainly.
				numNew -= len(seq.draft)
				seq.draft, seq.draftByModel = nil, false
				continue
			}
			victim := s.running[len(s.running)-1]
			s.preempt(victim)
			plan.preempted++
			if victim == seq {
				self = true
				break
			}
		}
		if self {
			break
		}
		take(seq, numNew, shifts)
		i++
	}

	// Waiting sequences, only when nothing was preempted (the pool is tight otherwise).
	if plan.preempted > 0 {
		return plan, nil
	}
	slots := s.runningSlots()
	var fresh map[string]bool // first blocks this step computes (sharesFresh)
	for len(s.waiting) > 0 && budget > 0 {
		seq := s.waiting[0]
		if slots+seq.slots() > s.cfg.MaxNumSeqs {
			break
		}
		if !s.adapterFits(seq) {
			break
		}
		if seq.pending > 0 {
			// Preempted while a step in flight samples for it: its recomputation needs
			// that token, which arrives before the next step is planned.
			break
		}
		var hits []kvcache.BlockID
		numComputed := 0
		if s.kv.PrefixCacheEnabled() && !seq.req.wantsPromptLogprobs() && !seq.req.policy.Drops() && !s.poolsEveryRow {
			hits, numComputed = s.kv.GetComputedBlocks(seq.tokens, seq.req.salt)
		}
		key, wait := s.sharesFresh(seq, numComputed, fresh)
		if wait {
			break
		}
		imported := importable(seq, numComputed/s.kv.BlockSize())
		numNew := len(seq.tokens) - numComputed - len(imported)*s.kv.BlockSize()
		if numNew > budget && s.cfg.DisableChunkedPrefill && len(plan.seqs) > 0 {
			break
		}
		// A sequence not admitted yet holds nothing to drop: its policy only caps the chunk.
		_, numNew = seq.req.policy.Plan(0, chunk(seq, min(numNew, budget)), nil)
		// Imported blocks take slots but no budget: their KV arrives, it is not computed.
		ok, err := s.kv.Allocate(seq.id, kvcache.Alloc{NumComputed: numComputed, NumNew: len(imported)*s.kv.BlockSize() + numNew, Computed: hits, Salt: seq.req.salt})
		if err != nil {
			return plan, fmt.Errorf("engine: admit %q: %w", seq.id, err)
		}
		if !ok {
			break
		}
		if len(imported) > 0 {
			first := numComputed / s.kv.BlockSize()
			table := s.kv.BlockTable(seq.id)
			plan.writes = append(plan.writes, blockWrite{blocks: table[first : first+len(imported)], kv: imported})
			numComputed += len(imported) * s.kv.BlockSize()
		}
		seq.fetched = nil
		seq.saved = max(seq.saved, numComputed/s.kv.BlockSize())
		s.waiting = s.waiting[1:]
		seq.numComputed = numComputed
		seq.status = statusRunning
		s.running = insertSorted(s.running, seq)
		slots += seq.slots()
		s.prefixQueries += int64(len(seq.tokens))
		s.hits += int64(numComputed)
		if !seq.req.admitted {
			seq.req.admitted = true
			seq.req.cached = numComputed
		}
		if key != "" {
			if fresh == nil {
				fresh = map[string]bool{}
			}
			fresh[key] = true
		}
		take(seq, numNew, nil)
	}
	return plan, nil
}

// adapterFits reports whether seq may join the running sequences under MaxLoRAs: it runs
// the base model or an adapter already running, or fewer adapters than the cap run.
func (s *scheduler) adapterFits(seq *sequence) bool {
	a := seq.req.adapter
	if a == nil || s.cfg.MaxLoRAs <= 0 {
		return true
	}
	running := map[*lora.Adapter]bool{}
	for _, r := range s.running {
		if r.req.adapter != nil {
			running[r.req.adapter] = true
		}
	}
	return running[a] || len(running) < s.cfg.MaxLoRAs
}

// adapterNames returns the names of the adapters of seqs, each once, sorted.
func adapterNames(seqs []*sequence) []string {
	var names []string
	for _, q := range seqs {
		if a := q.req.adapter; a != nil && !slices.Contains(names, a.Name) {
			names = append(names, a.Name)
		}
	}
	slices.Sort(names)
	return names
}

// importable returns the blocks a KVStore found for seq that follow its first hits cached
// blocks: none when the lookup found nothing, or when a block before the found ones left
// the cache since (the run would have a hole).
func importable(seq *sequence, hits int) [][]byte {
	f := seq.fetched
	if f == nil || hits < f.from || hits >= f.from+len(f.kv) {
		return nil
	}
	return f.kv[hits-f.from:]
}
