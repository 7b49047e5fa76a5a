package engine

import (
	"fmt"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// stepJob is one step on its way through the pipeline: planned and built on the engine
// loop, run (copies and forward pass) by runner.execute, finished on the loop.
type stepJob struct {
	id     int64 // step number, counted from 1 in planning order
	plan   stepPlan
	buf    *batchBuffer
	holes  []placeholder    // batch tokens the step before this one is still sampling
	copies []kvcache.CopyOp // copy-on-write orders, performed before the forward pass
	writes []importWrite    // imported KV, written before the copies
	mode   forwardMode
	rows   []backend.SampleRow // device sampling settings, for forwardSample
	// reads are blocks to read out for a KVStore before the step writes anything, its
	// imports (plan.writes) and copies included (kvstore.go).
	reads []blockRead
	// masks, for a device pick of masked rows, carries the rows' vocabulary masks from the
	// loop, which computes them while the step runs, to the forward pass (capacity 1).
	masks chan [][]uint32
	// drafts are the step's draft-model runs (speculative decoding), prepared at launch and
	// run before the target's forward pass.
	drafts []*draftRun
	done   chan stepResult // capacity 1: the result, sent once
	// overlapped is whether a later step was planned before this one's result was taken.
	overlapped bool
	// cost is what the step cost, for the speculation policy (set when taken).
	cost StepCost
	// picks are the tokens fast sampled from the result, in order, for slow to stream.
	picks []pick
	// pooled are the embeddings the step completed (a pooling engine's), for slow.
	pooled []pooled
}

// stepResult is what a step's forward pass returns: logits rows or token ids (see
// runner.execute), or an error; and what its draft phase and forward pass cost.
type stepResult struct {
	logits []float32
	ids    []int32
	hidden []float32 // a pooling engine's final hidden states, in place of logits
	err    error

	draftPasses, draftTokens int
	draftTime, targetTime    time.Duration
	// cost is set when the result is taken.
}

// pick is a token appended to a sequence by fast, with what slow needs to handle it: the
// sequence's output count and length right after the token (later tokens may have been
// appended by the time slow runs).
type pick struct {
	seq    *sequence
	tok    int32
	lp     []Logprob
	numOut int
	length int
}

// forwardLoop is the forward goroutine of asynchronous scheduling: it runs the steps it is
// handed, one at a time and in order, and hands back each result on the step's channel. It
// returns when jobs is closed, closing stopped.
func (e *Engine) forwardLoop(jobs <-chan *stepJob, stopped chan<- struct{}) {
	defer close(stopped)
	for job := range jobs {
		job.done <- e.runner.execute(job)
	}
}

// step advances the pipeline by one step:
//
//	next = plan()        schedule and build step N+1 while step N runs
//	wait(N); fast(N)     take N's result, sample and append its tokens
//	launch(next)         fill in N+1's placeholder tokens, start it
//	slow(N)              cache blocks, detokenize, stop, stream, finish: while N+1 runs
//
// With async scheduling off, or nothing in flight, there is no N: the step planned is
// launched, waited for and finished at once, the serial order.
//
// A step in flight that verifies drafts is finished before the next is planned: its
// sequences keep a number of tokens known only then, so a step planned meanwhile would
// leave them out (they sit it out), and from then on they would run every other step,
// out of phase with the rest of the batch, paying a step's slot for each verification.
// Waiting costs one step's overlap of host and device work and keeps the batch whole.
func (e *Engine) step() {
	prev := e.inflight
	if prev != nil && prev.verifies() {
		if !e.finish(prev) {
			return
		}
		prev = nil
	}
	next, err := e.plan(prev != nil)
	if err != nil {
		// Scheduling itself failed (a bookkeeping bug): let the step in flight end, so
		// that nothing runs on blocks about to be freed, then fail everything.
		if prev != nil {
			if res := e.wait(prev); res.err != nil {
				e.failStep(prev, res.err)
			}
		}
		e.failAll(err)
		return
	}
	if prev != nil {
		if err := e.take(prev); err != nil {
			// next was built on prev's tokens and is not launched: it fails with it.
			if next != nil {
				e.failStep(next, err)
			}
			e.publishStats()
			return
		}
	}
	if next != nil {
		e.launch(next)
	}
	if prev != nil {
		e.slow(prev)
	}
	if next == nil || !e.cfg.DisableAsyncScheduling {
		return
	}
	e.finish(next)
}

// finish takes a launched step and does its host work, in the serial order; false when
// its forward pass failed (its requests are failed instead).
func (e *Engine) finish(job *stepJob) bool {
	if err := e.take(job); err != nil {
		e.publishStats()
		return false
	}
	e.slow(job)
	return true
}

// verifies reports whether the step verifies some sequence's drafts.
func (job *stepJob) verifies() bool {
	for _, sc := range job.plan.seqs {
		if sc.numDraft > 0 {
			return true
		}
	}
	return false
}

// take waits for a launched step and takes its tokens (fast); when its forward pass failed
// it fails the step's requests instead and returns the error.
func (e *Engine) take(job *stepJob) error {
	res := e.wait(job)
	if res.err != nil {
		e.failStep(job, res.err)
		return res.err
	}
	e.fast(job, res)
	job.cost = StepCost{Tokens: len(job.buf.batch.Tokens), Target: res.targetTime,
		DraftPasses: res.draftPasses, DraftTokens: res.draftTokens, Draft: res.draftTime}
	for _, sc := range job.plan.seqs {
		job.cost.VerifyTokens += sc.numDraft
	}
	return nil
}

// plan schedules and builds the next step; nil when nothing is to run. An empty schedule
// is normal while a step is in flight (its sequences may be sure to finish, or about to
// fork); with none in flight it cannot happen for admitted requests, and is an error
// rather than a spin.
func (e *Engine) plan(inFlight bool) (*stepJob, error) {
	if len(e.active) == 0 {
		return nil, nil
	}
	e.victims = e.victims[:0] // only evictions by this schedule are read by its step
	plan, err := e.sched.schedule()
	if err != nil {
		return nil, err
	}
	e.publishStats()
	if len(plan.seqs) == 0 {
		if inFlight {
			return nil, nil
		}
		return nil, fmt.Errorf("engine: no request could be scheduled (%d waiting, %d free blocks)", len(e.sched.waiting), e.kv.NumFreeBlocks())
	}
	now := e.cfg.Now()
	for _, sc := range plan.seqs {
		if r := sc.seq.req; r.firstScheduled.IsZero() {
			r.firstScheduled = now
		}
	}
	buf, holes := e.runner.build(&plan, e.kv)
	e.planned++
	job := &stepJob{
		id: e.planned, plan: plan, buf: buf, holes: holes,
		// Taken now, with the allocations that ordered them; performed by the forward
		// goroutine right before this step's forward pass, so after every KV write of
		// the step in flight (a copy's source may be a block that step fills).
		copies: e.kv.TakeCopies(),
		writes: e.writes,
		done:   make(chan stepResult, 1),
	}
	e.writes = nil
	if e.store != nil {
		job.reads = append(append(job.reads, e.reads...), e.victims...)
		e.reads, e.victims = nil, e.victims[:0]
	}
	e.offerPlanned(job)
	return job, nil
}

// offerPlanned offers the prefix cache the full blocks the step will complete whose tokens
// are known now (prompt chunks; not a token still being sampled), as vLLM does when it
// schedules: a request admitted in the next plan can then share them although this step
// has not run yet. That is safe because steps run in order, so a step that reads a hit
// runs after the step that writes it; if this step fails instead, failStep takes its
// requests' blocks out of the cache again.
func (e *Engine) offerPlanned(job *stepJob) {
	for _, sc := range job.plan.seqs {
		seq := sc.seq
		if seq.req.policy.Drops() {
			continue // its blocks stop matching its tokens' hash chain
		}
		known := min(sc.start+sc.numNew, len(seq.tokens))
		if err := e.kv.CacheFullBlocks(seq.id, seq.tokens, known); err != nil {
			e.failRequest(seq.req, err)
		}
	}
}

// launch fills in the step's placeholder tokens, now sampled, picks its forward mode, and
// starts it: on the forward goroutine, or here when async scheduling is off.
func (e *Engine) launch(job *stepJob) {
	for _, h := range job.holes {
		seq := h.seq
		switch {
		case h.pos < len(seq.tokens):
			job.buf.batch.Tokens[h.index] = seq.tokens[h.pos]
		case seq.status != statusFinished:
			// Cannot happen: the sequence was unfinished when this step was planned, so
			// fast gave it its token unless it failed it.
			e.failRequest(seq.req, fmt.Errorf("engine: step %d: token %d of %q never arrived", job.id, h.pos, seq.id))
		}
		// A finished sequence keeps token 0: its KV slot is past its last token and its
		// result is ignored.
	}
	e.markStale(job)
	job.drafts = e.draftRuns(job)
	job.mode, job.rows = e.runner.mode(&job.plan, job.buf)
	masked := job.mode != forwardLogits && e.anyMasker(job)
	if masked {
		job.masks = make(chan [][]uint32, 1)
	}
	hostMasked := job.mode == forwardLogits && e.anyMasker(job)
	if e.cfg.DisableAsyncScheduling {
		if masked {
			job.masks <- e.stepMasks(job)
		}
		job.done <- e.runner.execute(job)
		return
	}
	e.inflight = job
	e.jobs <- job
	if masked {
		// While the device runs the step's layers; the forward pass waits for them only
		// before its sampling.
		job.masks <- e.stepMasks(job)
	}
	if hostMasked {
		// The host samples after the forward pass: the masks are ready by then.
		e.premasks(job)
	}
}

// anyMasker reports whether a sequence that samples in the step has a processor that masks.
func (e *Engine) anyMasker(job *stepJob) bool {
	for _, sc := range job.plan.seqs {
		if sc.sampling && len(sc.seq.maskers) > 0 {
			return true
		}
	}
	return false
}

// wait blocks until the step's result is in; the step is no longer in flight.
func (e *Engine) wait(job *stepJob) stepResult {
	res := <-job.done
	if e.inflight == job {
		e.inflight = nil
	}
	job.overlapped = e.planned > job.id
	return res
}

// failStep fails every request that has a sequence in the step, first taking the
// sequences' blocks out of the prefix cache: the step was to write the keys and values of
// blocks offered when it was planned (offerPlanned).
func (e *Engine) failStep(job *stepJob, err error) {
	for _, sc := range job.plan.seqs {
		e.kv.Uncache(sc.seq.id)
	}
	for _, w := range job.writes {
		// Their KV may not have landed: they must not serve as prefix hits.
		e.kv.Uncache(w.holder)
	}
	for _, sc := range job.plan.seqs {
		if sc.seq.status != statusFinished {
			e.failRequest(sc.seq.req, err)
		}
	}
}

// fast takes a finished step's tokens: for each sequence that sampled, the device's ids or
// host draws from its logits rows (forking its siblings first when n > 1), its drafts
// verified and the rejected ones rolled back, the tokens appended with everything the
// next sampling and the next step's input depend on; prompt logprobs are scored and beams
// ranked. It streams and finishes nothing: that is slow's work, done while the next step
// runs.
//
// A sequence finished since the step was planned (aborted, or ended by slow of the step
// before) has its result ignored. A sequence preempted since still gets its tokens: it is
// waiting now, and is recomputed with them.
func (e *Engine) fast(job *stepJob, res stepResult) {
	runs := make([]*draftRun, len(job.plan.seqs))
	for _, run := range job.drafts {
		runs[run.entry] = run
	}
	row := 0
	for i := range job.plan.seqs {
		sc := &job.plan.seqs[i]
		first := row
		row += len(sc.rows)
		seq := sc.seq
		if sc.sampling && !sc.stale {
			seq.pending--
		}
		if sc.mass != nil && sc.massEpoch == seq.massEpoch {
			seq.mass.add(sc.mass, sc.numNew-sc.massFrom)
			seq.massPending = false
		}
		if seq.status == statusFinished || sc.stale {
			if sc.sampling {
				e.discarded++
			}
			continue
		}
		if res.hidden != nil {
			e.poolRows(job, sc, res.hidden, first)
			continue
		}
		job.picks = append(job.picks, e.takeRows(sc, runs[i], res, first)...)
	}
	for i := range job.plan.seqs {
		job.plan.seqs[i].seq.premaskAt = 0 // this step's, used or not
	}
}

// slow finishes a step's host work, while the next step runs: offers the prefix cache the
// full blocks the step completed that offerPlanned could not (their last token was being
// sampled when the step was planned), then detokenizes, checks stops and lengths, streams,
// and finishes sequences (freeing their blocks).
//
// A sequence finished here may be in the step in flight. That is safe: its result there
// is ignored (fast skips finished sequences); the KV slot that step writes for it is past
// the tokens cached here, so it is never in a prefix-cached block; and a block freed here
// goes to a new owner at the earliest in the step planned next, whose writes come after
// every write of the step in flight (steps run one at a time, each launched only after the
// one before returned), and which writes each slot before it reads it.
func (e *Engine) slow(job *stepJob) {
	var promptTokens int64
	for _, sc := range job.plan.seqs {
		seq := sc.seq
		if sc.start < seq.numPrompt {
			promptTokens += int64(min(sc.start+sc.numNew, seq.numPrompt) - sc.start)
		}
		// Only a running sequence holds blocks: a finished one freed them, and a
		// preempted one was not readmitted since (admission waits for its pending token,
		// which fast appended after the only schedule that could have preempted it).
		if seq.status != statusRunning || seq.req.policy.Drops() {
			continue
		}
		if err := e.kv.CacheFullBlocks(seq.id, seq.tokens, sc.start+sc.numNew); err != nil {
			e.failRequest(seq.req, err)
			continue
		}
		if e.store != nil && e.store.Shared() {
			e.orderSaves(seq, &sc)
		}
	}
	e.emitStep++
	e.stepPrompt, e.stepGen = 0, 0
	e.finishPooled(job)
	for _, p := range job.picks {
		if p.seq.status != statusFinished {
			e.emit(p)
		}
	}
	e.mu.Lock()
	e.stats.Steps++
	e.stats.ComputedPromptTokens += promptTokens
	e.mu.Unlock()
	if e.stepGen > 0 && e.cfg.OnStepDone != nil {
		e.cfg.OnStepDone(StepStats{PromptTokens: e.stepPrompt, GenerationTokens: e.stepGen})
	}
	e.publishStats()
	if job.overlapped {
		e.overlapped++
	}
	if p := e.cfg.Speculation.policy(); p != nil {
		p.Stepped(job.cost)
	}
	if e.afterStep != nil {
		e.afterStep()
	}
}
