package engine

import (
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
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
}

// scheduled is one sequence's share of a step: numNew tokens from numComputed on.
type scheduled struct {
	seq    *sequence
	numNew int
	// logits is whether the step ends at the sequence's last token, so a token is sampled
	// (prefill chunks before the last produce no logits).
	logits bool
}

// stepPlan is the scheduler's decision for one step.
type stepPlan struct {
	seqs      []scheduled
	numTokens int
	preempted int
}

// scheduler is the vLLM v1 style token-budget scheduler. It has no prefill or decode phase:
// each sequence has numComputed of len(tokens) tokens in the cache, and every step hands the
// budget to running sequences first (decodes and unfinished prompt chunks alike), then to
// waiting ones in priority and arrival order. When the KV pool runs out, the last running
// sequence in that order (lowest priority, newest) is preempted: its blocks are freed and it
// waits to be recomputed, prefix-cache hits included. Since a request that cannot fit alone
// is refused at submission, the first sequence in order always progresses: no livelock.
//
// Speculative decoding fits as more than one new token for a running sequence (numNew > 1)
// followed by kv.Truncate of the rejected tail; imported KV fits as numComputed set from
// outside before admission.
type scheduler struct {
	cfg     SchedulerConfig
	kv      *kvcache.Manager
	waiting []*sequence // sorted by before
	running []*sequence // sorted by before

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

// runningSlots is the number of max-num-seqs slots the running sequences take.
func (s *scheduler) runningSlots() int {
	n := 0
	for _, r := range s.running {
		n += r.slots()
	}
	return n
}

// preempt frees a running sequence's blocks and queues it for recomputation.
func (s *scheduler) preempt(seq *sequence) {
	s.running, _ = remove(s.running, seq)
	s.kv.Free(seq.id)
	seq.numComputed = 0
	s.add(seq)
	s.preemptions++
}

// schedule plans the next step.
func (s *scheduler) schedule() (stepPlan, error) {
	var plan stepPlan
	budget := s.cfg.MaxNumBatchedTokens
	take := func(seq *sequence, numNew int) {
		plan.seqs = append(plan.seqs, scheduled{seq: seq, numNew: numNew, logits: seq.numComputed+numNew == len(seq.tokens)})
		plan.numTokens += numNew
		budget -= numNew
	}

	// Running sequences first, in order; victims come from the end of the list, which
	// holds sequences not yet scheduled this step (or the current one itself).
	for i := 0; i < len(s.running) && budget > 0; {
		seq := s.running[i]
		numNew := min(len(seq.tokens)-seq.numComputed, budget)
		if numNew <= 0 {
			return plan, fmt.Errorf("engine: running sequence %q has nothing to compute (%d of %d tokens)", seq.id, seq.numComputed, len(seq.tokens))
		}
		self := false
		for {
			ok, err := s.kv.Allocate(seq.id, kvcache.Alloc{NumComputed: seq.numComputed, NumNew: numNew})
			if err != nil {
				return plan, fmt.Errorf("engine: schedule %q: %w", seq.id, err)
			}
			if ok {
				break
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
		take(seq, numNew)
		i++
	}

	// Waiting sequences, only when nothing was preempted (the pool is tight otherwise).
	if plan.preempted > 0 {
		return plan, nil
	}
	slots := s.runningSlots()
	for len(s.waiting) > 0 && budget > 0 {
		seq := s.waiting[0]
		if slots+seq.slots() > s.cfg.MaxNumSeqs {
			break
		}
		var hits []kvcache.BlockID
		numComputed := 0
		if s.kv.PrefixCacheEnabled() {
			hits, numComputed = s.kv.GetComputedBlocks(seq.tokens, seq.req.salt)
		}
		numNew := len(seq.tokens) - numComputed
		if numNew > budget && s.cfg.DisableChunkedPrefill && len(plan.seqs) > 0 {
			break
		}
		numNew = min(numNew, budget)
		ok, err := s.kv.Allocate(seq.id, kvcache.Alloc{NumComputed: numComputed, NumNew: numNew, Computed: hits, Salt: seq.req.salt})
		if err != nil {
			return plan, fmt.Errorf("engine: admit %q: %w", seq.id, err)
		}
		if !ok {
			break
		}
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
		take(seq, numNew)
	}
	return plan, nil
}
