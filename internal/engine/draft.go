package engine

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// This file holds the draft phase of speculative decoding with a draft model: before a
// step's target forward pass, on the forward goroutine, the draft model decodes each
// drafting sequence's k draft tokens, and they are written into the step's batch where the
// scheduler left placeholders. Its first pass catches the draft's cache up with the
// sequence (the tokens it has not seen, ending at the sequence's last token) and drafts the
// first token; each further pass feeds the token just drafted. The draft's cache shares the
// target's block numbering, so its keys and values go to the same blocks' slots, which the
// scheduler allocated for the step (a draft writes positions up to the step's last but one).
//
// The drafts are drawn with the request's own processing (penalties, logit bias, min-tokens
// suppression, temperature, top-k, top-p, min-p) from a copy of its state, with random
// draws of their own, and each sampled draft keeps the distribution it was drawn from, which
// the verification needs (accept.go). Masks of a request's processors do not shape the
// drafts: a draft the mask forbids is rejected like any other.

// draftRun is one sequence's part of a step's draft phase.
type draftRun struct {
	entry  int     // the sequence's index in the step's plan
	start  int     // position of the first catch-up token
	tokens []int32 // the catch-up tokens, ending at the sequence's last token
	k      int     // drafts to make
	table  []int32 // the sequence's block table
	holes  []int   // where the drafts go in the step's batch
	// sampler draws the drafts; pen and sup are its penalties and min-tokens suppression
	// (nil when unused), told each draft; minTokens and numOutput set sup's state.
	sampler              *sample.Sampler
	pen                  *sample.Penalties
	sup                  *sample.Suppress
	minTokens, numOutput int
	greedy               bool // a plain greedy sampler: the draft's argmax, picked where its backend can

	drafts []int32
	dists  []sample.Dist // the distribution of each draft (sampled requests only)
}

// draftRuns prepares the draft phase of a step being launched: one run per sequence whose
// drafts are placeholders. It reads the sequences' state, so it runs on the loop.
func (e *Engine) draftRuns(job *stepJob) []*draftRun {
	var runs []*draftRun
	b := &job.buf.batch
	for i := range job.plan.seqs {
		sc := &job.plan.seqs[i]
		seq := sc.seq
		if sc.numDraft == 0 || !seq.draftByModel || seq.status == statusFinished {
			continue
		}
		start := seq.draftComputed
		if e.runner.draftShared {
			start = sc.start // the draft's cache is the target's: valid up to the step's start
		}
		L := len(seq.tokens)
		qs := b.Seqs[i].QueryStart
		run := &draftRun{entry: i, start: start, tokens: append([]int32(nil), seq.tokens[start:L]...), k: sc.numDraft,
			table: b.Seqs[i].BlockTable, minTokens: seq.req.params.MinTokens, numOutput: seq.numOutput()}
		for d := range sc.numDraft {
			run.holes = append(run.holes, qs+sc.numNew-sc.numDraft+d)
		}
		seq.draftRuns++
		if seq.penalties != nil {
			run.pen = seq.penalties.Clone().(*sample.Penalties)
		}
		if seq.suppress != nil {
			run.sup = &sample.Suppress{IDs: seq.suppress.IDs}
		}
		// Seeded from the sequence's own draws, so a seeded request drafts the same way
		// each run; the draws are the draft's own, apart from the target's.
		seed := seq.sampler.Params().Seed ^ (seq.draftRuns * 0x9e3779b97f4a7c15)
		run.sampler = samplerFor(seq.req.params, seed, run.pen, run.sup)
		run.greedy = run.sampler.Greedy()
		runs = append(runs, run)
	}
	return runs
}

// next draws run's next draft from the draft model's logits row and advances its state.
func (run *draftRun) next(logits []float32) int32 {
	if run.sup != nil {
		run.sup.Active = run.numOutput+len(run.drafts) < run.minTokens
	}
	dist := run.sampler.Dist(logits)
	tok := dist.IDs[0]
	if !run.sampler.Greedy() && run.sampler.Params().Temperature > 0 {
		tok = dist.Draw(run.sampler.Uniform())
		run.dists = append(run.dists, dist)
	}
	if run.pen != nil {
		_ = run.pen.Accept([]int32{tok})
	}
	return tok
}

// draftPhase runs the draft model over the step's draft runs and writes their drafts into
// the step's batch; it returns the passes and tokens it ran (forward goroutine).
func (r *runner) draftPhase(job *stepJob) (passes, tokens int, err error) {
	runs := job.drafts
	bs := r.blockSize
	b := &r.draftBatch
	for pass := 0; ; pass++ {
		b.Tokens, b.Positions, b.SlotMapping = b.Tokens[:0], b.Positions[:0], b.SlotMapping[:0]
		b.Seqs, b.LogitsIndices = b.Seqs[:0], b.LogitsIndices[:0]
		var live []*draftRun
		greedy := true
		for _, run := range runs {
			if pass >= run.k {
				continue
			}
			toks, pos := run.tokens, run.start
			if pass > 0 {
				toks, pos = run.drafts[pass-1:pass], run.start+len(run.tokens)+pass-1
			}
			qs := len(b.Tokens)
			for i, t := range toks {
				p := pos + i
				b.Tokens = append(b.Tokens, t)
				b.Positions = append(b.Positions, int32(p))
				b.SlotMapping = append(b.SlotMapping, run.table[p/bs]*int32(bs)+int32(p%bs))
			}
			b.Seqs = append(b.Seqs, model.Seq{BlockTable: run.table, QueryStart: qs, QueryLen: len(toks), ContextLen: pos + len(toks)})
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
			live = append(live, run)
			greedy = greedy && run.greedy
		}
		if len(live) == 0 {
			return passes, tokens, nil
		}
		passes++
		tokens += len(b.Tokens)
		if greedy {
			ids, err := r.draft.ForwardGreedy(b, nil)
			if err != nil {
				return passes, tokens, fmt.Errorf("engine: draft pass %d: %w", pass, err)
			}
			for i, run := range live {
				run.drafts = append(run.drafts, ids[i])
			}
		} else {
			logits, err := r.draft.Forward(b)
			if err != nil {
				return passes, tokens, fmt.Errorf("engine: draft pass %d: %w", pass, err)
			}
			v := len(logits) / len(live)
			for i, run := range live {
				run.drafts = append(run.drafts, run.next(logits[i*v:(i+1)*v]))
			}
		}
		for _, run := range live {
			job.buf.batch.Tokens[run.holes[pass]] = run.drafts[pass]
		}
	}
}
