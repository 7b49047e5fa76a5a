package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// This file holds acceptance: what the engine does with a finished step's logits rows or
// device-picked ids for one sequence. Rows that score prompt tokens become prompt
// logprobs; the sampling rows verify the sequence's draft tokens one by one (a draft is
// kept when the token the sequence samples from the row before it is that draft: the
// tokens kept are exactly what sampling token by token would have produced), the first
// row that disagrees, or the last, gives one more token, and the drafts after it are
// rolled back: their KV is truncated and the scheduler recomputes from the first token
// not computed.

// errNoToken is a sequence's mask allowing no token at all.
var errNoToken = errors.New("engine: the request's logits processors allow no next token")

// takeRows handles the rows of entry sc of a finished step (fast), the entry's first row
// being row first of the result. It returns the picks of the tokens accepted, for slow to
// emit.
func (e *Engine) takeRows(sc *scheduled, run *draftRun, res stepResult, first int) []pick {
	seq := sc.seq
	if run != nil {
		// The draft phase filled the placeholders: what the step verified.
		seq.draft, seq.draftDists = run.drafts, run.dists
		if seq.status == statusRunning && !e.runner.draftShared {
			seq.draftComputed = run.start + len(run.tokens) + run.k - 1
		}
	}
	numScore := len(sc.rows) - sc.numSampling()
	if numScore > 0 && res.logits != nil {
		e.scorePrompt(sc, res.logits, first, numScore)
	}
	if !sc.sampling {
		return nil
	}
	first += numScore
	switch {
	case seq.beam != nil:
		e.beamRow(seq, e.logitsRow(res.logits, first))
		return nil
	case res.ids != nil:
		return e.verify(sc, false, func(j int) (int32, []Logprob, bool) { return res.ids[first+j], nil, true })
	}
	var picks []pick
	if seq.forkPending {
		picks = e.fork(seq, e.logitsRow(res.logits, first))
	}
	dists, draft := seq.draftDists, seq.draft
	return append(picks, e.verify(sc, true, func(j int) (int32, []Logprob, bool) {
		row := e.logitsRow(res.logits, first+j)
		var tok int32
		ok := true
		if j < len(dists) {
			tok, ok = e.judge(seq, row, draft[j], dists[j])
		} else {
			tok, ok = e.draw(seq, row)
		}
		return tok, e.logprobs(seq, row, tok), ok
	})...)
}

// judge verifies a draft token drawn from the draft's distribution q against the target's
// distribution at its row (modified rejection sampling, see sample.KeepDraft): it returns
// the draft when kept, else the token drawn from the residual. It reports false, having
// failed the request, when the target's mask allows nothing.
func (e *Engine) judge(seq *sequence, logits []float32, draft int32, q sample.Dist) (int32, bool) {
	p, ok := e.dist(seq, logits)
	if !ok {
		return 0, false
	}
	if sample.KeepDraft(p, q, draft, seq.sampler.Uniform()) || e.keepAllDrafts {
		return draft, true
	}
	return sample.Residual(p, q, seq.sampler.Uniform()), true
}

// dist returns the distribution seq's next token is drawn from at a logits row: its mask
// applied, then its sampler's processing (see draw).
func (e *Engine) dist(seq *sequence, logits []float32) (sample.Dist, bool) {
	if seq.suppress != nil {
		seq.suppress.Active = seq.numOutput() < seq.req.params.MinTokens
	}
	mask, err := e.currentMask(seq)
	if err != nil {
		e.failRequest(seq.req, err)
		return sample.Dist{}, false
	}
	if mask != nil {
		logits = slices.Clone(logits)
		mask.Apply(logits)
	}
	return seq.sampler.Dist(logits), true
}

// logitsRow returns row i of a step's logits.
func (e *Engine) logitsRow(logits []float32, i int) []float32 {
	return logits[i*e.vocab : (i+1)*e.vocab]
}

// verify takes the tokens of entry sc's sampling rows in order, next(j) giving row j's
// token (drawn on the host when host is set, else picked on the device): a row's token is
// accepted, and while it equals the draft token the step verified after it the next row
// is taken too. The drafts not kept are rolled back. It returns the picks of the accepted
// tokens (none when the sequence finished or failed on the way).
func (e *Engine) verify(sc *scheduled, host bool, next func(j int) (int32, []Logprob, bool)) []pick {
	seq := sc.seq
	draft, judged := seq.draft, seq.draftDists != nil
	seq.draft, seq.draftDists, seq.draftByModel = nil, nil, false
	var picks []pick
	kept := 0 // drafts kept
	used := 0 // rows whose token was taken
	var jf jump
	afterDraft := false // jf follows a kept draft
	for j := 0; j <= len(draft) && seq.status != statusFinished; j++ {
		tok, lp, ok := next(j)
		if !ok {
			break
		}
		used++
		p, ok := e.accept(seq, tok, lp)
		if !ok {
			break
		}
		picks = append(picks, p)
		if j == len(draft) || tok != draft[j] {
			jf = e.jumpAfter(seq)
			break
		}
		kept++
		// The grammar forces tokens after a kept draft: the drafts after it are dropped.
		if jf = e.jumpAfter(seq); len(jf.tokens) > 0 {
			afterDraft = true
			break
		}
	}
	if len(draft) > 0 {
		e.countVerified(seq, len(draft), kept)
	}
	// Computed tokens taken back: the drafts not kept, and a kept draft the jump replaces.
	drop := len(draft) - kept
	if afterDraft {
		drop += jf.replace
	}
	if unused := len(draft) + 1 - used; host && !judged && unused > 0 {
		e.skipDraws(seq, unused)
	}
	if drop > 0 {
		if err := e.rollback(sc, drop); err != nil {
			e.failRequest(seq.req, err)
			return nil
		}
	}
	return e.applyJump(seq, jf, picks)
}

// countVerified counts a verification of n drafts of which kept were kept, and tells the
// speculation policy.
func (e *Engine) countVerified(seq *sequence, n, kept int) {
	e.mu.Lock()
	e.stats.SpecDrafts++
	e.stats.DraftTokens += int64(n)
	e.stats.AcceptedDrafts += int64(kept)
	for i := range kept {
		e.stats.AcceptedPerPos[i]++
	}
	e.mu.Unlock()
	if p := e.cfg.Speculation.policy(); p != nil {
		p.Verified(string(seq.id), n, kept)
	}
}

// skipDraws takes the uniforms a device sampler drew for rows the host did not use (rows
// after a rejected draft), so that a seeded sequence's draws stay in step whichever side
// sampled it.
func (e *Engine) skipDraws(seq *sequence, n int) {
	if e.model.CanSample() && seq.sampler.Plain() && seq.sampler.Params().Temperature > 0 {
		for range n {
			seq.sampler.Uniform()
		}
	}
}

// rollback takes back the last n tokens entry sc computed (rejected drafts): the entry now
// computed n fewer, and a sequence that still holds its blocks drops the KV of those
// positions (blocks past its new length go back to the pool, and blocks no longer full stop
// counting as finalized for the prefix cache). A sequence preempted since holds nothing.
func (e *Engine) rollback(sc *scheduled, n int) error {
	sc.numNew -= n
	seq := sc.seq
	if seq.status != statusRunning {
		return nil
	}
	seq.numComputed -= n
	seq.draftComputed = min(seq.draftComputed, seq.numComputed)
	if err := e.kv.Truncate(seq.id, seq.numComputed-seq.dropped); err != nil {
		return fmt.Errorf("engine: roll back %d draft tokens of %q: %w", n, seq.id, err)
	}
	return nil
}

// sampleOne samples seq's next token from its logits row and appends it (see accept);
// false when seq is finished or fails.
func (e *Engine) sampleOne(seq *sequence, logits []float32) (pick, bool) {
	if seq.status == statusFinished {
		return pick{}, false
	}
	tok, ok := e.draw(seq, logits)
	if !ok {
		return pick{}, false
	}
	return e.accept(seq, tok, e.logprobs(seq, logits, tok))
}

// draw picks seq's next token from a logits row on the host: the tokens its processors'
// mask forbids are set to -Inf, then its sampler chooses. Where plain samplers draw on the
// device, they draw the same way on the host (a step with a logprobs request or a fork
// comes here), so that a seeded request's tokens do not depend on what it was batched
// with. It reports false, having failed the request, when the mask allows nothing.
func (e *Engine) draw(seq *sequence, logits []float32) (int32, bool) {
	if seq.suppress != nil {
		seq.suppress.Active = seq.numOutput() < seq.req.params.MinTokens
	}
	var mask sample.Mask
	var err error
	if seq.premaskAt == len(seq.tokens) {
		mask = seq.premask // computed while the step ran, from the same state
	} else if mask, err = e.currentMask(seq); err != nil {
		e.failRequest(seq.req, err)
		return 0, false
	}
	seq.premaskAt = 0
	if mask != nil {
		logits = slices.Clone(logits)
		mask.Apply(logits)
	}
	if e.model.CanSample() && seq.sampler.Plain() && seq.sampler.Params().Temperature > 0 {
		row := sampleRow(seq.sampler)
		return int32(sample.DrawIndexOrder(logits, row.Temperature, int(row.TopK), row.TopP, float64(row.Uniform))), true
	}
	return int32(seq.sampler.Sample(logits)), true
}

// logprobs returns the logprobs entry of token tok sampled from logits (the model's raw
// logits, before any processor), or nil when the request did not ask for logprobs.
func (e *Engine) logprobs(seq *sequence, logits []float32, tok int32) []Logprob {
	p := &seq.req.params
	if !p.Logprobs && p.TopLogprobs == 0 {
		return nil
	}
	chosen, top := sample.Logprobs(logits, int(tok), p.TopLogprobs)
	return []Logprob{{Token: chosen, Rank: sample.Rank(logits, int(tok)), Top: top}}
}

// accept appends a token to seq with what the next sampling and the next step's input
// depend on (its stateful processors are told), and returns the pick that emit handles
// later; false, having failed the request, when a processor refuses the token.
func (e *Engine) accept(seq *sequence, tok int32, lp []Logprob) (pick, bool) {
	seq.tokens = append(seq.tokens, tok)
	for _, p := range seq.procs {
		if err := p.Accept([]int32{tok}); err != nil {
			e.failRequest(seq.req, fmt.Errorf("engine: token %d: %w", tok, err))
			return pick{}, false
		}
	}
	return pick{seq: seq, tok: tok, lp: lp, numOut: seq.numOutput(), length: len(seq.tokens)}, true
}

// currentMask returns the tokens seq's processors allow next (the intersection of their
// masks), or nil when none restricts; errNoToken when the intersection is empty.
func (e *Engine) currentMask(seq *sequence) (sample.Mask, error) {
	var mask sample.Mask
	for _, m := range seq.maskers {
		mm := m.Mask()
		if mm == nil {
			continue
		}
		if err := mm.CheckLen(e.vocab); err != nil {
			return nil, err
		}
		if mask == nil {
			seq.mask = append(seq.mask[:0], mm...)
			mask = seq.mask
		} else {
			mask.And(mm)
		}
	}
	if mask != nil && mask.Count(e.vocab) == 0 {
		return nil, errNoToken
	}
	return mask, nil
}

// premasks computes the masks of a host-sampled step's rows while its forward pass runs,
// for the sequences that draw one token from their row (no drafts to verify, no beam),
// so that draw finds them ready instead of computing them after the pass: the masks
// depend only on the tokens accepted so far, all known at launch. A mask that allows
// nothing is left for draw to find again and fail the request.
func (e *Engine) premasks(job *stepJob) {
	for i := range job.plan.seqs {
		sc := &job.plan.seqs[i]
		seq := sc.seq
		if !sc.sampling || sc.stale || sc.numSampling() != 1 || len(seq.maskers) == 0 || seq.status == statusFinished || seq.beam != nil {
			continue
		}
		mask, err := e.currentMask(seq)
		if err != nil || mask == nil {
			continue
		}
		seq.premask = append(seq.premask[:0], mask...)
		seq.premaskAt = len(seq.tokens)
	}
}

// stepMasks returns the masks of a step's logits rows for a device pick (greedy or
// sampled), in row order, or nil when no sampling sequence has a mask. The rows verifying a
// sequence's drafts are masked as if the drafts before them were accepted: the maskers are
// told them, and rolled back after. It runs on the loop, while the device runs the step's
// layers (see launch); a sequence whose mask allows nothing is failed and its rows left
// unmasked (their tokens are ignored).
func (e *Engine) stepMasks(job *stepJob) [][]uint32 {
	var masks [][]uint32
	any := false
	for i := range job.plan.seqs {
		sc := &job.plan.seqs[i]
		seq := sc.seq
		for range len(sc.rows) - sc.numSampling() {
			masks = append(masks, nil)
		}
		n := sc.numSampling()
		if n == 0 {
			continue
		}
		if len(seq.maskers) == 0 || seq.status == statusFinished || sc.stale {
			for range n {
				masks = append(masks, nil)
			}
			continue
		}
		rows, err := e.draftMasks(seq, n)
		if err != nil {
			e.failRequest(seq.req, err)
			rows = make([][]uint32, n)
		}
		masks = append(masks, rows...)
		any = true
	}
	if !any {
		return nil
	}
	return masks
}

// draftMasks returns the masks of seq's n sampling rows: the current mask, then the mask
// after each draft token in turn. A draft its mask forbids cannot be kept, so the rows
// after it are left unmasked.
func (e *Engine) draftMasks(seq *sequence, n int) ([][]uint32, error) {
	rows := make([][]uint32, n)
	told := make([]int, len(seq.maskers)) // drafts each masker accepted, to roll back
	defer func() {
		for i, m := range seq.maskers {
			m.Rollback(told[i])
		}
	}()
	for j := range n {
		mask, err := e.currentMask(seq)
		if err != nil {
			return nil, err
		}
		rows[j] = slices.Clone(mask)
		if j == n-1 || (mask != nil && !mask.Allows(seq.draft[j])) {
			break
		}
		for i, m := range seq.maskers {
			if m.Accept(seq.draft[j:j+1]) != nil {
				return rows, nil
			}
			told[i]++
		}
	}
	return rows, nil
}

// scorePrompt appends the prompt logprobs of entry sc's first n rows (prompt tokens it
// scores), the first being row first of logits. A row for a position already scored (a
// recomputed prompt) is skipped.
func (e *Engine) scorePrompt(sc *scheduled, logits []float32, first, n int) {
	r := sc.seq.req
	for i, o := range sc.rows[:n] {
		p := sc.start + o
		if p != len(r.promptLPs) {
			continue
		}
		row, tok := e.logitsRow(logits, first+i), int(r.prompt[p+1])
		chosen, top := sample.Logprobs(row, tok, r.params.PromptTopLogprobs)
		r.promptLPs = append(r.promptLPs, Logprob{Token: chosen, Rank: sample.Rank(row, tok), Top: top})
	}
}
