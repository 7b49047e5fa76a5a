package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// runner turns a step plan into a model Batch, performs the KV block copies the plan
// ordered, and runs the forward pass. Building happens on the engine loop; copies and the
// forward pass run on the forward goroutine (pipeline.go). Two batch buffers take turns, so
// that the next step is built while the previous one's batch is in use.
type runner struct {
	model Model
	// draft is the draft model of speculative decoding (nil without one); draftShared says
	// its keys and values are the target's own (the target's first layers).
	draft       Model
	draftShared bool
	draftBatch  model.Batch // the draft phase's batch, reused (forward goroutine)
	blockSize   int
	bufs        [2]batchBuffer
	next        int // index of the buffer the next build fills
	// store and bio, with a KVStore: the step's block reads and imports (kvstore.go).
	store KVStore
	bio   BlockIO
	// hidden is the model of a pooling engine, whose steps return hidden states.
	hidden HiddenModel
	// clock times the forward passes (Config.StepClock, or the wall clock).
	clock func() time.Duration
}

// stepClock returns the clock of Config.StepClock: c, or the time since the first call.
func stepClock(c func() time.Duration) func() time.Duration {
	if c != nil {
		return c
	}
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// batchBuffer is one step's batch and the backing store of its block tables, reused from
// step to step.
type batchBuffer struct {
	batch model.Batch
	table []int32
	// layers are the step's per-layer KV reports (Request.OnLayerKV).
	layers layerReads
}

// placeholder is a batch token whose value the step in flight is still sampling: the
// token at position pos of seq, to be written at Tokens[index] before the batch runs.
type placeholder struct {
	index int
	seq   *sequence
	pos   int
}

// forwardMode is which model entry point a step uses (see runner.mode).
type forwardMode int

const (
	forwardLogits forwardMode = iota // model.Forward: logits rows back to the host
	forwardGreedy                    // model.ForwardGreedy: greedy token ids
	forwardSample                    // model.ForwardSample: tokens drawn on the device
	forwardHidden                    // ForwardHidden: a pooling engine's hidden states
)

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
	if err := r.model.CopyBlocks(copies); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if r.draft != nil && !r.draftShared {
		if err := r.draft.CopyBlocks(copies); err != nil {
			return fmt.Errorf("engine: draft cache: %w", err)
		}
	}
	return nil
}

// build fills the next batch buffer from the plan, reading block tables from the manager,
// and returns it with the positions whose tokens are not known yet (placeholders, left 0
// in the batch). Each entry runs from its start, the numComputed it was scheduled from;
// its last numDraft tokens are its draft tokens.
func (r *runner) build(plan *stepPlan, mgr *kvcache.Manager) (*batchBuffer, []placeholder) {
	buf := &r.bufs[r.next]
	r.next = 1 - r.next
	b := &buf.batch
	b.Tokens, b.Positions, b.SlotMapping = b.Tokens[:0], b.Positions[:0], b.SlotMapping[:0]
	b.Seqs, b.LogitsIndices = b.Seqs[:0], b.LogitsIndices[:0]
	buf.table, b.AfterLayer = buf.table[:0], nil
	buf.layers.reset()
	bs := r.blockSize
	// Block tables first, into one buffer, so that growing it does not move slices taken
	// earlier in the loop below.
	starts := make([]int, len(plan.seqs)+1)
	for i, sc := range plan.seqs {
		starts[i] = len(buf.table)
		buf.table = mgr.AppendBlockTable(buf.table, sc.seq.id)
	}
	starts[len(plan.seqs)] = len(buf.table)
	var holes []placeholder
	for i, sc := range plan.seqs {
		seq := sc.seq
		table := buf.table[starts[i]:starts[i+1]]
		qs := len(b.Tokens)
		end := sc.start + sc.numNew
		for p := sc.start; p < end; p++ {
			tok := int32(0)
			switch d := p - (end - sc.numDraft); {
			case d >= 0:
				tok = seq.draft[d]
			case p < len(seq.tokens):
				tok = seq.tokens[p]
			default:
				holes = append(holes, placeholder{index: len(b.Tokens), seq: seq, pos: p})
			}
			// Its place in the cache, which is also its RoPE position (see kvcache.Policy).
			c := p - sc.dropped
			b.Tokens = append(b.Tokens, tok)
			b.Positions = append(b.Positions, int32(c))
			b.SlotMapping = append(b.SlotMapping, table[c/bs]*int32(bs)+int32(c%bs))
		}
		b.Seqs = append(b.Seqs, model.Seq{BlockTable: table, QueryStart: qs, QueryLen: sc.numNew, ContextLen: end - sc.dropped,
			Mass: sc.mass, MassFrom: sc.massFrom, Adapter: seq.req.adapter})
		for _, o := range sc.rows {
			b.LogitsIndices = append(b.LogitsIndices, qs+o)
		}
		r.reportLayers(buf, sc, table)
	}
	if len(buf.layers.reports) > 0 {
		b.AfterLayer = buf.layers.afterLayer
	}
	return buf, holes
}

// mode picks the step's model entry point, on the engine loop, just before the step starts
// (after the previous step's tokens were sampled, so that the samplers' draws keep their
// order): logits when no sequence samples, some scores prompt tokens, or some needs its
// logits on the host; greedy ids
// when every sampling sequence takes the plain argmax (greedyOnly); device draws when the
// backend samples and every sampling sequence samples plainly (plainOnly), with their rows
// (sampleRows takes each sampler's next uniform).
func (r *runner) mode(plan *stepPlan, buf *batchBuffer) (forwardMode, []backend.SampleRow) {
	switch {
	case r.hidden != nil:
		return forwardHidden, nil
	case len(buf.batch.LogitsIndices) == 0 || scores(plan):
		return forwardLogits, nil
	case greedyOnly(plan):
		return forwardGreedy, nil
	case r.model.CanSample() && plainOnly(plan):
		return forwardSample, sampleRows(plan)
	default:
		return forwardLogits, nil
	}
}

// execute runs one built step: the copies, then the forward pass. It returns the logits of
// the sampling sequences in plan order, one vocabulary-sized row each, or, in the greedy
// and device-sampling modes, their token ids with nil logits. It touches nothing but the
// model, the KV cache tensors and the step's own buffer, so it may run off the engine
// loop; a panic comes back as an error.
func (r *runner) execute(job *stepJob) (res stepResult) {
	defer func() {
		if p := recover(); p != nil {
			res = stepResult{err: fmt.Errorf("engine: step panicked: %v", p)}
		}
	}()
	// Compactions read first: their blocks may have been released and handed out again.
	for _, sc := range job.plan.seqs {
		for _, sh := range sc.shifts {
			if c := sh.compact; c != nil {
				var err error
				if c.buf, err = r.model.ReadKV(c.src); err != nil {
					return stepResult{err: fmt.Errorf("engine: kv policy of %q: %w", sc.seq.id, err)}
				}
			}
		}
	}
	if r.store != nil {
		readBlocks(r.bio, r.store, job.reads)
		if err := writeBlocks(r.bio, job.plan.writes); err != nil {
			return stepResult{err: err}
		}
	}
	if err := r.writeImports(job.writes); err != nil {
		return stepResult{err: err}
	}
	if err := r.copyBlocks(job.copies); err != nil {
		return stepResult{err: err}
	}
	for _, sc := range job.plan.seqs {
		for _, sh := range sc.shifts {
			if c := sh.compact; c != nil {
				if err := r.model.CompactKeys(c.buf, c.keep, c.dst); err != nil {
					return stepResult{err: fmt.Errorf("engine: kv policy of %q: %w", sc.seq.id, err)}
				}
				c.buf = nil
				continue
			}
			if err := r.model.ShiftKeys(sh.blocks, sh.delta); err != nil {
				return stepResult{err: fmt.Errorf("engine: kv policy of %q: %w", sc.seq.id, err)}
			}
		}
	}
	b := &job.buf.batch
	var err error
	if len(job.drafts) > 0 {
		t := r.clock()
		if res.draftPasses, res.draftTokens, err = r.draftPhase(job); err != nil {
			return stepResult{err: err}
		}
		res.draftTime = r.clock() - t
	}
	t := r.clock()
	defer func() { res.targetTime = r.clock() - t }()
	// The layers' copies reported while the step ran are all handed over when it returns.
	defer job.buf.layers.finish()
	var masks MaskFunc
	if job.masks != nil {
		masks = func() ([][]uint32, error) { return <-job.masks, nil }
	}
	switch job.mode {
	case forwardGreedy:
		res.ids, err = r.model.ForwardGreedy(b, masks)
	case forwardSample:
		res.ids, err = r.model.ForwardSample(b, job.rows, masks)
	case forwardHidden:
		res.hidden, err = r.hidden.ForwardHidden(b)
	default:
		res.logits, err = r.model.Forward(b)
	}
	if err != nil {
		return stepResult{err: fmt.Errorf("engine: step of %d tokens in %d sequences: %w", len(b.Tokens), len(b.Seqs), err)}
	}
	return res
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

// samplesPlainly reports whether seq's next token depends on nothing but its logits, its
// sampler's settings (temperature, top-k and top-p only: no penalties, logit bias,
// min-tokens suppression or min-p) and its processors' vocabulary mask, which a device
// applies too: no logprobs, no fork pending (a fork samples its children from the same
// logits), not a beam (beams rank the top log probabilities), and no sampled draft-model
// drafts (their verification needs the target's distribution on the host).
func samplesPlainly(seq *sequence) bool {
	p := &seq.req.params
	return seq.sampler.Plain() && !p.Logprobs && p.TopLogprobs == 0 && !seq.forkPending && seq.beam == nil &&
		!(seq.draftByModel && p.Temperature > 0)
}

// everySampling reports whether ok holds for every sequence of the plan that samples this
// step.
func everySampling(plan *stepPlan, ok func(*sequence) bool) bool {
	for _, sc := range plan.seqs {
		if sc.sampling && !ok(sc.seq) {
			return false
		}
	}
	return true
}

// scores reports whether some sequence of the plan scores prompt tokens (rows beyond its
// sampling rows), whose logits the host needs.
func scores(plan *stepPlan) bool {
	for _, sc := range plan.seqs {
		if len(sc.rows) > sc.numSampling() {
			return true
		}
	}
	return false
}

// sampleRows returns the device sampling settings of the plan's sampling rows, in row
// order (see sampleRow): a sequence verifying drafts draws once per row.
func sampleRows(plan *stepPlan) []backend.SampleRow {
	var rows []backend.SampleRow
	for _, sc := range plan.seqs {
		for range sc.numSampling() {
			if sc.stale {
				// Its pick is ignored: no draw is taken from the sequence's sampler.
				rows = append(rows, backend.SampleRow{Temperature: 1, TopK: 1, TopP: 1})
				continue
			}
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
