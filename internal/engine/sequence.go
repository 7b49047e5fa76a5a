package engine

import (
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// This file holds a sequence's life: made for a request (or forked from a sibling), then
// ended (finishSeq) and, with its last sibling, the request completed.

// newSequence makes choice index of r with the given tokens (the prompt, or a copy of the
// parent's tokens for a fork), with its own sampler seeded for the choice and the stateful
// processors procs (the request's, or clones of the parent's).
func (e *Engine) newSequence(r *request, index int, tokens []int32, procs []sample.Stateful) *sequence {
	p := r.params
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed + uint64(index)
	} else {
		seed = e.rng.Uint64()
	}
	seq := &sequence{
		id:        kvcache.RequestID(fmt.Sprintf("%s#%d", r.id, index)),
		req:       r,
		index:     index,
		tokens:    slices.Clip(slices.Clone(tokens)),
		numPrompt: len(r.prompt),
		penalties: sample.NewPenalties(p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty, r.prompt),
		mass:      newMassState(r.policy, e.massShape),
	}
	if seq.penalties != nil {
		seq.procs = append(seq.procs, seq.penalties)
	}
	if p.MinTokens > 0 {
		seq.suppress = &sample.Suppress{IDs: e.minTokensBans(p)}
	}
	for _, proc := range procs {
		seq.procs = append(seq.procs, proc)
		if m, ok := proc.(sample.Masker); ok {
			seq.maskers = append(seq.maskers, m)
		}
		if f, ok := proc.(sample.Forcer); ok && seq.forcer == nil {
			seq.forcer = f
		}
	}
	seq.sampler = samplerFor(p, seed, seq.penalties, seq.suppress)
	if e.tok != nil {
		seq.detok = tokenizer.NewDetokenizer(e.tok, !p.KeepSpecialTokens)
		seq.stop = r.stops.Matcher(p.IncludeStopStrInOutput)
	}
	return seq
}

// samplerFor returns the sampler of a sequence with parameters p and random seed seed, its
// penalties pen and its min-tokens suppression sup (each nil when unused) run first, then the
// logit bias, then temperature, top-k, top-p and min-p.
func samplerFor(p SamplingParams, seed uint64, pen *sample.Penalties, sup *sample.Suppress) *sample.Sampler {
	var extra []sample.Processor
	if pen != nil {
		extra = append(extra, pen)
	}
	if len(p.LogitBias) > 0 {
		extra = append(extra, sample.LogitBias(p.LogitBias))
	}
	if sup != nil {
		extra = append(extra, sup)
	}
	return sample.New(sample.Params{Temperature: p.Temperature, TopK: max(p.TopK, 0), TopP: p.TopP, MinP: p.MinP, Seed: seed}, extra...)
}

// cloneProcs returns clones of the request's processors held by seq (its penalties are
// made anew by newSequence), for a sequence forked from it.
func cloneProcs(seq *sequence) []sample.Stateful {
	var procs []sample.Stateful
	for _, p := range seq.procs {
		if p != sample.Stateful(seq.penalties) {
			procs = append(procs, p.Clone())
		}
	}
	return procs
}

// minTokensBans lists the tokens min_tokens holds back: end-of-generation tokens (unless
// ignore_eos) and stop token ids.
func (e *Engine) minTokensBans(p SamplingParams) []int32 {
	ids := slices.Clone(p.StopTokenIDs)
	if e.tok != nil && !p.IgnoreEOS {
		for id := range e.tok.NumTokens() {
			if e.tok.IsEOG(id) {
				ids = append(ids, int32(id))
			}
		}
	}
	return ids
}

// fork starts choices 1..n-1 of parent's request from its state and samples their first
// tokens from the same logits; it returns their picks. The children share the parent's
// blocks; a parent preempted while its step ran holds none, and its children wait to be
// recomputed like it.
func (e *Engine) fork(parent *sequence, logits []float32) []pick {
	parent.forkPending = false
	r := parent.req
	var picks []pick
	for i := 1; i < r.n; i++ {
		child := e.newSequence(r, i, parent.tokens, cloneProcs(parent))
		r.seqs = append(r.seqs, child)
		if !e.attach(parent, child) {
			return nil
		}
		if p, ok := e.sampleOne(child, logits); ok {
			picks = e.applyJump(child, e.jumpAfter(child), append(picks, p))
		}
	}
	return picks
}

// attach queues a sequence forked from parent: sharing the parent's blocks when it holds
// them (copy on write), or waiting to be computed when it does not. It reports false, having
// failed the request, when the KV manager refuses the fork (which cannot happen while the
// parent is held).
func (e *Engine) attach(parent, child *sequence) bool {
	if parent.status != statusRunning {
		e.sched.add(child)
		return true
	}
	child.numComputed, child.draftComputed, child.dropped = parent.numComputed, parent.draftComputed, parent.dropped
	child.saved = parent.saved // the blocks it shares are the parent's to save
	child.mass = parent.mass.clone()
	if err := e.kv.Fork(parent.id, child.id); err != nil {
		e.sched.addRunning(child)
		e.failRequest(parent.req, err)
		return false
	}
	e.sched.addRunning(child)
	return true
}

// usage returns r's token counts so far.
func (e *Engine) usage(r *request) Usage {
	return Usage{PromptTokens: len(r.prompt), CompletionTokens: r.genCount, CachedPromptTokens: r.cached}
}

// finishSeq ends seq with an output carrying no new tokens.
func (e *Engine) finishSeq(seq *sequence, reason string, stopReason any, text string, err error) {
	e.finishSeqWith(seq, Output{RequestID: seq.req.id, Index: seq.index, Text: text}, reason, stopReason, err)
}

// finishSeqWith ends seq: frees its blocks, sends its last output, and completes the
// request when it was the last choice.
func (e *Engine) finishSeqWith(seq *sequence, out Output, reason string, stopReason any, err error) {
	r := seq.req
	e.sched.finish(seq)
	if p := e.cfg.Speculation.policy(); p != nil {
		p.Done(string(seq.id))
	}
	r.reasons[seq.index] = reason
	r.clocks[seq.index].end = e.cfg.Now()
	r.finished++
	out.FinishReason, out.StopReason, out.Err = reason, stopReason, err
	out.Usage = e.usage(r)
	r.out.push(out)
	e.mu.Lock()
	e.stats.Finished[reason]++
	e.mu.Unlock()
	if r.finished == r.n {
		e.complete(r)
	}
}

// complete ends a request whose choices have all finished: closes its stream, forgets it,
// and reports its stats.
func (e *Engine) complete(r *request) {
	e.releaseImport(r)
	e.endFetch(r)
	e.publishStats() // before the stream closes: its client may read the metrics next
	r.out.close()
	delete(e.active, r.id)
	e.mu.Lock()
	delete(e.inFlight, r.id)
	e.mu.Unlock()
	if e.cfg.OnRequestDone != nil {
		e.cfg.OnRequestDone(e.requestStats(r))
	}
}

// requestStats summarizes a finished request.
func (e *Engine) requestStats(r *request) RequestStats {
	now := e.cfg.Now()
	st := RequestStats{
		RequestID: r.id, E2E: now.Sub(r.arrival),
		PromptTokens: len(r.prompt), GenerationTokens: r.genCount, CachedPromptTokens: r.cached, PeakKVBlocks: r.peakBlocks,
		N: r.n, MaxTokens: r.maxTokens, FinishReasons: slices.Clone(r.reasons),
	}
	if !r.firstScheduled.IsZero() {
		st.QueueTime = r.firstScheduled.Sub(r.arrival)
	}
	if !r.firstToken.IsZero() {
		st.TTFT = r.firstToken.Sub(r.arrival)
	}
	if r.beam != nil {
		return st
	}
	st.Choices = make([]ChoiceStats, len(r.clocks))
	for i, c := range r.clocks {
		cs := &st.Choices[i]
		cs.GenerationTokens, cs.ITL, cs.E2E = c.tokens, c.itl, st.E2E
		if !c.end.IsZero() {
			// (A choice that never ran, of a request failed before it forked, ends with it.)
			cs.E2E = c.end.Sub(r.arrival)
		}
		if c.tokens > 0 {
			cs.TTFT, cs.Decode = c.first.Sub(r.arrival), c.last.Sub(c.first)
		}
	}
	return st
}
