package engine

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// runner turns a step plan into a model Batch, performs the KV block copies the plan
// ordered, and runs the forward pass. It reuses its buffers from step to step.
type runner struct {
	model *model.Model
	kv    *model.KVCache
	batch model.Batch
	table []int32 // backing store of the step's block tables
}

// copyBlocks performs copy-on-write orders: block Src's keys and values, in every layer,
// into block Dst.
func (r *runner) copyBlocks(ops []kvcache.CopyOp) error {
	if len(ops) == 0 {
		return nil
	}
	copies := make([]backend.BlockCopy, len(ops))
	for i, op := range ops {
		copies[i] = backend.BlockCopy{Src: op.Src, Dst: op.Dst}
	}
	if err := r.kv.CopyBlocks(copies); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return nil
}

// build fills r.batch from the plan, reading block tables from the manager.
func (r *runner) build(plan *stepPlan, mgr *kvcache.Manager) {
	b := &r.batch
	b.Tokens, b.Positions, b.SlotMapping = b.Tokens[:0], b.Positions[:0], b.SlotMapping[:0]
	b.Seqs, b.LogitsIndices = b.Seqs[:0], b.LogitsIndices[:0]
	r.table = r.table[:0]
	bs := r.kv.BlockSize
	// Block tables first, into one buffer, so that growing it does not move slices taken
	// earlier in the loop below.
	starts := make([]int, len(plan.seqs)+1)
	for i, sc := range plan.seqs {
		starts[i] = len(r.table)
		r.table = mgr.AppendBlockTable(r.table, sc.seq.id)
	}
	starts[len(plan.seqs)] = len(r.table)
	for i, sc := range plan.seqs {
		seq := sc.seq
		table := r.table[starts[i]:starts[i+1]]
		qs := len(b.Tokens)
		for p := seq.numComputed; p < seq.numComputed+sc.numNew; p++ {
			b.Tokens = append(b.Tokens, seq.tokens[p])
			b.Positions = append(b.Positions, int32(p))
			b.SlotMapping = append(b.SlotMapping, table[p/bs]*int32(bs)+int32(p%bs))
		}
		b.Seqs = append(b.Seqs, model.Seq{BlockTable: table, QueryStart: qs, QueryLen: sc.numNew, ContextLen: seq.numComputed + sc.numNew})
		if sc.logits {
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
	}
}

// run executes one step: copies, then the forward pass. It returns the logits of the
// sequences with logits set, in plan order, one vocabulary-sized row each; or, when every
// such sequence samples greedily from unprocessed logits (greedyOnly), their greedy token
// ids instead (picked on the device where the backend can), with nil logits; or, when the
// backend samples on the device and every such sequence's sampler is plain (plainOnly),
// the tokens drawn there, so that full logits are not copied back.
func (r *runner) run(plan *stepPlan, mgr *kvcache.Manager) (logits []float32, ids []int32, err error) {
	if err := r.copyBlocks(mgr.TakeCopies()); err != nil {
		return nil, nil, err
	}
	r.build(plan, mgr)
	switch {
	case len(r.batch.LogitsIndices) == 0:
		logits, err = r.model.Forward(&r.batch, r.kv)
	case greedyOnly(plan):
		ids, err = r.model.ForwardGreedy(&r.batch, r.kv)
	case r.model.CanSample() && plainOnly(plan):
		ids, err = r.model.ForwardSample(&r.batch, r.kv, sampleRows(plan))
	default:
		logits, err = r.model.Forward(&r.batch, r.kv)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("engine: step of %d tokens in %d sequences: %w", len(r.batch.Tokens), len(r.batch.Seqs), err)
	}
	return logits, ids, nil
}

// greedyOnly reports whether every sequence of the plan that samples this step takes the
// plain argmax of its logits: it samples plainly (samplesPlainly) at temperature 0.
func greedyOnly(plan *stepPlan) bool {
	return everySampling(plan, func(seq *sequence) bool {
		return samplesPlainly(seq) && seq.sampler.Greedy()
	})
}

// plainOnly reports whether every sequence of the plan that samples this step samples
// plainly: its draw can be made on the device from its settings and its sampler's next
// uniform.
func plainOnly(plan *stepPlan) bool { return everySampling(plan, samplesPlainly) }

// samplesPlainly reports whether seq's next token depends on nothing but its logits and
// its sampler's settings: temperature, top-k and top-p only (no penalties, logit bias,
// min-tokens suppression or min-p), no logprobs, and no fork pending (a fork samples its
// children from the same logits).
func samplesPlainly(seq *sequence) bool {
	p := &seq.req.params
	return seq.sampler.Plain() && !p.Logprobs && p.TopLogprobs == 0 && !seq.forkPending
}

// everySampling reports whether ok holds for every sequence of the plan that samples this
// step.
func everySampling(plan *stepPlan, ok func(*sequence) bool) bool {
	for _, sc := range plan.seqs {
		if sc.logits && !ok(sc.seq) {
			return false
		}
	}
	return true
}

// sampleRows returns the device sampling settings of the plan's sampling sequences, in
// plan order (see sampleRow).
func sampleRows(plan *stepPlan) []backend.SampleRow {
	var rows []backend.SampleRow
	for _, sc := range plan.seqs {
		if sc.logits {
			rows = append(rows, sampleRow(sc.seq.sampler))
		}
	}
	return rows
}

// sampleRow returns the device sampling settings of a plain sampler, taking its next
// uniform (the draw its host sampler would have used) when it samples. Greedy is top-1 at
// draw 0.
func sampleRow(s *sample.Sampler) backend.SampleRow {
	sp := s.Params()
	if sp.Temperature <= 0 {
		return backend.SampleRow{Temperature: 1, TopK: 1, TopP: 1}
	}
	topP := sp.TopP
	if topP <= 0 || topP > 1 {
		topP = 1
	}
	// float32 rounding must not carry a draw just below 1 up to 1.
	u := min(float32(s.Uniform()), math.Nextafter32(1, 0))
	return backend.SampleRow{Temperature: sp.Temperature, TopK: int32(sp.TopK), TopP: topP, Uniform: u}
}
