package model

import (
	"errors"
	"fmt"
	"sync"
)

// microBatch is one part of a step's batch that a pipeline runs as a unit: a run of
// whole sequences, renumbered from its first token, and the place of its logits rows in
// the step's.
type microBatch struct {
	batch Batch
	// out is the index in the step's LogitsIndices of the micro-batch's first logits row;
	// its rows follow on in order.
	out int
}

// microBatches splits b into up to Pipeline micro-batches of consecutive sequences with
// about as many tokens each, so that stage s can run micro-batch i while stage s+1 runs
// micro-batch i-1. A batch of one sequence, a model of one stage, or a batch whose logits
// rows are not in token order stays whole.
func (m *Model) microBatches(b *Batch) []microBatch {
	k := min(m.par.Pipeline, len(b.Seqs))
	for i := 1; i < len(b.LogitsIndices); i++ {
		if b.LogitsIndices[i] <= b.LogitsIndices[i-1] {
			k = 1
		}
	}
	if k <= 1 {
		return []microBatch{{batch: *b}}
	}
	total := len(b.Tokens)
	var out []microBatch
	first, nextLogits := 0, 0
	for i, s := range b.Seqs {
		end := s.QueryStart + s.QueryLen
		left := k - len(out) - 1 // groups still to start after this one
		cut := end*k >= (len(out)+1)*total || len(b.Seqs)-1-i == left
		if i == len(b.Seqs)-1 || (cut && left > 0) {
			out = append(out, m.microBatch(b, first, i+1, &nextLogits))
			first = i + 1
		}
	}
	return out
}

// microBatch makes the micro-batch of sequences [from, to) of b; next is the index in
// b.LogitsIndices of its first logits row, advanced past its rows.
func (m *Model) microBatch(b *Batch, from, to int, next *int) microBatch {
	t0 := b.Seqs[from].QueryStart
	t1 := b.Seqs[to-1].QueryStart + b.Seqs[to-1].QueryLen
	mb := microBatch{out: *next, batch: Batch{
		Tokens: b.Tokens[t0:t1], Positions: b.Positions[t0:t1], SlotMapping: b.SlotMapping[t0:t1],
	}}
	for _, s := range b.Seqs[from:to] {
		s.QueryStart -= t0
		mb.batch.Seqs = append(mb.batch.Seqs, s)
	}
	for *next < len(b.LogitsIndices) && b.LogitsIndices[*next] < t1 {
		mb.batch.LogitsIndices = append(mb.batch.LogitsIndices, b.LogitsIndices[*next]-t0)
		*next++
	}
	return mb
}

// runSplit runs a checked batch on every rank of a split model at once, each rank on its
// own goroutine, micro-batch after micro-batch: the ranks of a stage meet in their
// all-reduces, and a stage waits for the previous one's residual stream. The last stage's
// first rank writes the logits (or greedy ids); the masks it needs come through a
// maskRelay from this goroutine. If any rank fails, the communicators are aborted so that
// no rank waits forever, and the model refuses later steps. A failing MaskFunc fails the
// step alone: the logits rank runs its remaining layers without output, so the ranks stay
// in step.
func (m *Model) runSplit(b *Batch, kv *KVCache, out stepOut, masks MaskFunc) error {
	mbs := m.microBatches(b)
	vocab := m.cfg.VocabSize
	relay := newMaskRelay(masks)
	errs, maskErrs := make([]error, len(m.ranks)), make([]error, len(m.ranks))
	var once sync.Once
	var wg sync.WaitGroup
	// The after-layer hooks run during the last micro-batch, when each layer holds every
	// micro-batch's keys and values (a rank runs its micro-batches in order).
	hooks := m.rankHooks(b.AfterLayer, kv)
	for r, s := range m.ranks {
		wg.Go(func() {
			defer func() { s.afterLayer = nil }()
			for i, mb := range mbs {
				s.afterLayer = nil
				if hooks != nil && i == len(mbs)-1 {
					s.afterLayer = hooks[r]
				}
				err := s.prepare(&mb.batch, kv.BlockSize) // no adapters: LoRA refuses a split model
				var part stepOut
				var mf MaskFunc
				if s.logits && maskErrs[r] == nil {
					part = out.slice(mb.out, len(mb.batch.LogitsIndices), vocab, m.cfg.Dim)
					mf = relay.rows(mb.out, len(mb.batch.LogitsIndices))
				}
				if err == nil {
					err = s.run(kv.parts[r], part, mf)
				}
				var me *maskError
				if errors.As(err, &me) {
					maskErrs[r] = err
					continue
				}
				if err != nil {
					errs[r] = fmt.Errorf("rank %d: %w", r, err)
					once.Do(m.abort)
					return
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	relay.serve(finished, out.n)
	<-finished
	if err := errors.Join(errs...); err != nil {
		m.breakWith(err)
		return err
	}
	return errors.Join(maskErrs...)
}

// slice returns the part of out that holds its logits rows [from, from+n).
func (out stepOut) slice(from, n, vocab, dim int) stepOut {
	part := stepOut{n: n}
	if out.hidden != nil {
		part.hidden = out.hidden[from*dim : (from+n)*dim]
	}
	if out.logits != nil {
		part.logits = out.logits[from*vocab : (from+n)*vocab]
	}
	if out.ids != nil {
		part.ids = out.ids[from : from+n]
	}
	if out.rows != nil {
		part.rows = out.rows[from : from+n]
	}
	return part
}

// abort breaks every communicator of the model, releasing ranks that wait on a peer.
func (m *Model) abort() {
	for _, c := range m.comms {
		c.Abort()
	}
}
