// Package model runs transformer models of the Llama family (Llama 2/3, Mistral, Mixtral,
// Qwen2, Qwen3, Qwen2-MoE) on any backend that implements the op set of package backend.
//
// Model is the fast path: weights bound by name from an opened format.Model and uploaded
// once, and a batched Forward over a paged KV cache, written once against the backend's
// small op set. A Model may be split across several backends by tensor and pipeline
// parallelism (Parallel), and its first layers run as a model of their own on its KV cache
// (FirstLayers: the draft of self-speculative decoding). Reference is the slow
// single-sequence fp32 path that tests use as the oracle. Session drives a Model for one sequence (the kernel-level figures of
// `kvasir bench generate`).
package model

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Options configures a Model.
type Options struct {
	// Backends run the model's ops, one per rank in rank order (see Parallel): one for a
	// model that is not split; for a split model, all of one kind that implements
	// backend.Grouper. They are required; the caller makes them (package kvasir does) and
	// closes them after the Model.
	Backends []backend.Backend
	// Parallel splits the model across ranks; the zero value runs it whole on one.
	Parallel Parallel
	// Progress, when set, is told the bytes of weights uploaded so far (for a progress bar
	// while weights are copied to a device).
	Progress func(done, total int64)
	// KVCacheDType is the element type of the KV caches the model makes (KVSpec.DType):
	// quant.F32 (the zero value), quant.F16, which halves the cache's memory and the bytes
	// attention reads, quant.BF16, or a quantized type (quant.KVInt8, KVFP8E4M3,
	// KVFP8E5M2: a byte per element and a scale per group, see package kvquant); the
	// backend refuses a type it does not hold (the CPU's holds all but BF16).
	KVCacheDType quant.Type
	// FP8 quantizes the dense linear layers' weights (attention's q, k, v and output, the
	// MLP's gate, up and down) to quant.FP8 at load, with a scale per output channel; the
	// weights must be F32, F16 or BF16 (or FP8 already). The rest keeps its type.
	FP8 bool
}

// Model is a transformer bound to its weights, ready to run batches: one shard holding
// all of it, or the shards of its ranks when it is split. A Model runs one Forward at a
// time (its activation buffers are reused from step to step); it is not safe for
// concurrent use.
type Model struct {
	cfg   format.Config
	par   Parallel
	kvDT  quant.Type // the element type asked of KV caches
	ranks []*shard   // rank order: stage-major
	comms []backend.Communicator
	// broken is the error of a split step that failed and aborted the communicators;
	// the model refuses to run after it.
	broken error
	// base is the model a view made by FirstLayers runs a part of (nil for a model of its
	// own): its weights, backends, communicators and KV caches.
	base *Model
}

// New binds the weights of an opened model and uploads them to the backends (each rank's
// part of them to its own when the model is split). The format.Model must stay open while
// the Model is used.
func New(m *format.Model, opt Options) (*Model, error) {
	par := opt.Parallel.orOne()
	if err := par.Check(m.Config); err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Path, err)
	}
	if dt := opt.KVCacheDType; dt != quant.F32 && dt != quant.F16 && dt != quant.BF16 && !dt.KVQuantized() {
		return nil, fmt.Errorf("model %s: kv cache dtype %s: want f32, f16, bf16, int8, fp8_e4m3 or fp8_e5m2", m.Path, dt)
	}
	if n := par.Ranks(); len(opt.Backends) != n {
		return nil, fmt.Errorf("model %s: %d backends for %d ranks (tensor-parallel %d x pipeline-parallel %d)", m.Path, len(opt.Backends), n, par.Tensor, par.Pipeline)
	}
	if m.Config.ExpertSigmoid {
		for _, be := range opt.Backends {
			if _, ok := be.(backend.BiasedRouter); !ok {
				return nil, fmt.Errorf("model %s: the backend %s cannot route experts by sigmoid scores (DeepSeek-V3)", m.Path, be.Name())
			}
		}
	}
	md := &Model{cfg: m.Config, par: par, kvDT: opt.KVCacheDType}
	for r, be := range opt.Backends {
		stage, last := r/par.Tensor, r/par.Tensor == par.Pipeline-1
		layer0, _ := par.stageLayers(m.Config.Layers, stage)
		md.ranks = append(md.ranks, &shard{
			cfg: par.rankConfig(m.Config, stage), be: be, stage: stage, layer0: layer0,
			first: stage == 0, last: last, logits: last && r%par.Tensor == 0, fp8: opt.FP8,
		})
	}
	if err := md.connect(); err != nil {
		md.Close()
		return nil, fmt.Errorf("model %s: %w", m.Path, err)
	}
	if err := md.upload(m, opt.Progress); err != nil {
		md.Close()
		return nil, err
	}
	return md, nil
}

// connect makes the communicators of a split model: one tensor-parallel group per stage
// and one pipeline group per place in a stage.
func (m *Model) connect() error {
	tp, pp := m.par.Tensor, m.par.Pipeline
	group := func(members []*shard, assign func(s *shard, c backend.Communicator)) error {
		bes := make([]backend.Backend, len(members))
		for i, s := range members {
			bes[i] = s.be
		}
		g, ok := bes[0].(backend.Grouper)
		if !ok {
			return fmt.Errorf("backend %s cannot join a communicator group", bes[0].Name())
		}
		comms, err := g.NewGroup(bes)
		if err != nil {
			return err
		}
		m.comms = append(m.comms, comms...)
		for i, s := range members {
			assign(s, comms[i])
		}
		return nil
	}
	if tp > 1 {
		for stage := range pp {
			if err := group(m.ranks[stage*tp:(stage+1)*tp], func(s *shard, c backend.Communicator) { s.tp = c }); err != nil {
				return fmt.Errorf("tensor-parallel group of stage %d: %w", stage, err)
			}
		}
	}
	if pp > 1 {
		for t := range tp {
			var members []*shard
			for stage := range pp {
				members = append(members, m.ranks[stage*tp+t])
			}
			if err := group(members, func(s *shard, c backend.Communicator) { s.pp = c }); err != nil {
				return fmt.Errorf("pipeline group %d: %w", t, err)
			}
		}
	}
	return nil
}

// upload gives each rank its part of m's weights, all ranks at once, telling progress
// (when set) the bytes done of all of them.
func (m *Model) upload(fm *format.Model, progress func(done, total int64)) error {
	sources := []source{fm}
	if len(m.ranks) > 1 {
		sources = sources[:0]
		for r := range m.ranks {
			p, err := m.par.rankPart(fm, r/m.par.Tensor, r%m.par.Tensor)
			if err != nil {
				return err
			}
			sources = append(sources, p)
		}
	}
	var sent func(n int64)
	if progress != nil {
		var mu sync.Mutex
		total, done := int64(0), int64(0)
		for _, src := range sources {
			total += sourceBytes(src, fm)
		}
		sent = func(n int64) {
			mu.Lock()
			defer mu.Unlock()
			done += n
			progress(done, total)
		}
	}
	errs := make([]error, len(m.ranks))
	var wg sync.WaitGroup
	for r, s := range m.ranks {
		wg.Go(func() { errs[r] = s.be.Run(func() error { return s.upload(sources[r], fm.Path, sent) }) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sourceBytes returns the bytes of the tensors a source holds.
func sourceBytes(src source, fm *format.Model) int64 {
	if p, ok := src.(*part); ok {
		var n int64
		for _, t := range p.tensors {
			n += int64(len(t.Data))
		}
		return n
	}
	return fm.Bytes()
}

// Config returns the model's hyperparameters.
func (m *Model) Config() format.Config { return m.cfg }

// Parallel returns how the model is split.
func (m *Model) Parallel() Parallel { return m.par }

// RankConfig returns the hyperparameters of the largest part one rank holds (the first
// stage's, which has the most layers): the heads, KV heads, MLP widths and layers of one
// rank, by which each rank's KV cache is sized. It is Config for a model that is not split.
func (m *Model) RankConfig() format.Config { return m.ranks[0].cfg }

// Close releases the communicators. (The backends keep the model's tensors until they are
// closed.) Closing a view made by FirstLayers does nothing.
func (m *Model) Close() {
	if m.base != nil {
		return
	}
	for _, c := range m.comms {
		c.Close()
	}
}

// WeightBytesPerToken returns the bytes of weights one decoded token reads, over all
// ranks: every matrix of every layer (for mixtures of experts only the experts used) and
// the output projection, as the backends hold them. The embedding row is negligible and
// left out.
func (m *Model) WeightBytesPerToken() int64 {
	var n int64
	for _, s := range m.ranks {
		n += s.weightBytesPerToken()
	}
	return n
}

// tensorBytes returns the bytes of a weight matrix as its backend holds it (0 for nil).
func tensorBytes(t backend.Tensor) int64 {
	if t == nil {
		return 0
	}
	shape := t.Shape()
	rb, err := t.DType().RowBytes(shape[len(shape)-1])
	if err != nil {
		return 0
	}
	rows := 1
	for _, d := range shape[:len(shape)-1] {
		rows *= d
	}
	return int64(rows * rb)
}

// Forward runs one step: it writes the keys and values of the batch's tokens into kv at
// their slots, attends each sequence's tokens over its cached context, and returns the
// logits of the rows named by b.LogitsIndices, len(LogitsIndices) x vocabulary, row after
// row (nil when none are named). The returned slice is new for each call.
func (m *Model) Forward(b *Batch, kv *KVCache) ([]float32, error) {
	if err := m.check(b, kv); err != nil {
		return nil, err
	}
	var logits []float32
	if len(b.LogitsIndices) > 0 {
		logits = make([]float32, len(b.LogitsIndices)*m.cfg.VocabSize)
	}
	if err := m.run(b, kv, stepOut{n: len(b.LogitsIndices), logits: logits}, nil); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return logits, nil
}

// ForwardHidden runs one step as Forward does but returns, instead of the logits, the
// final hidden state (after the output norm, before the output projection) of each row
// named by b.LogitsIndices, len(LogitsIndices) x Dim, row after row: a decoder's
// last-token embedding when the rows are the sequences' last tokens. The backend that
// computes the logits must read rows back (backend.RowReader).
func (m *Model) ForwardHidden(b *Batch, kv *KVCache) ([]float32, error) {
	if _, ok := m.ranks[m.logitsRank()].be.(backend.RowReader); !ok {
		return nil, fmt.Errorf("forward: the backend %s cannot read hidden states back", m.ranks[m.logitsRank()].be.Name())
	}
	if err := m.check(b, kv); err != nil {
		return nil, err
	}
	n := len(b.LogitsIndices)
	hidden := make([]float32, n*m.cfg.Dim)
	if n == 0 {
		return hidden, nil
	}
	if err := m.run(b, kv, stepOut{n: n, hidden: hidden}, nil); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return hidden, nil
}

// ForwardGreedy runs one step as Forward does but returns, instead of the logits, the
// greedy token of each row named by b.LogitsIndices: the index of the row's largest logit
// (the lowest among ties, NaN never chosen, as sample.Greedy picks it), among the tokens
// the row's mask allows when masks is set (see MaskFunc; a row whose mask allows nothing
// gets 0). The backend that computes the logits picks them (backend.ArgmaxLogits): a
// device copies back only the ids.
func (m *Model) ForwardGreedy(b *Batch, kv *KVCache, masks MaskFunc) ([]int32, error) {
	if _, ok := m.ranks[m.logitsRank()].be.(backend.ArgmaxLogits); !ok {
		return nil, fmt.Errorf("forward: the backend %s cannot pick greedy tokens", m.ranks[m.logitsRank()].be.Name())
	}
	if err := m.check(b, kv); err != nil {
		return nil, err
	}
	n := len(b.LogitsIndices)
	ids := make([]int32, n)
	if n == 0 {
		return ids, nil
	}
	if err := m.run(b, kv, stepOut{n: n, ids: ids}, masks); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return ids, nil
}

// CanSample reports whether the backend that computes the logits draws tokens itself
// (backend.LogitsSampler), so that ForwardSample may be used.
func (m *Model) CanSample() bool {
	_, ok := m.ranks[m.logitsRank()].be.(backend.LogitsSampler)
	return ok && m.cfg.FinalSoftcap == 0 // the device samplers know no soft-capping
}

// ForwardSample runs one step as Forward does but returns, instead of the logits, the
// token drawn on the device for each row named by b.LogitsIndices as rows says (one
// setting per row; see backend.SampleRow). When masks is set (see MaskFunc), the masks it
// returns replace the rows' Mask fields. It needs CanSample.
func (m *Model) ForwardSample(b *Batch, kv *KVCache, rows []backend.SampleRow, masks MaskFunc) ([]int32, error) {
	if !m.CanSample() {
		return nil, fmt.Errorf("forward: the backend %s cannot sample on the device", m.ranks[m.logitsRank()].be.Name())
	}
	if err := m.check(b, kv); err != nil {
		return nil, err
	}
	n := len(b.LogitsIndices)
	if len(rows) != n {
		return nil, fmt.Errorf("forward: %d sampling settings for %d logits rows", len(rows), n)
	}
	ids := make([]int32, n)
	if n == 0 {
		return ids, nil
	}
	if err := m.run(b, kv, stepOut{n: n, ids: ids, rows: rows}, masks); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return ids, nil
}

// ReportsAttentionMass reports whether a step may ask for attention mass (Seq.Mass): the
// model is not split, its backend reports it and its KV cache is not quantized (token
// compaction, CompactKeys, handles f32, f16 and bf16 caches).
func (m *Model) ReportsAttentionMass() bool {
	_, ok := m.ranks[0].be.(backend.AttentionMasser)
	return ok && len(m.ranks) == 1 && !m.kvDT.KVQuantized()
}

// AttentionMassLanes returns the rows of a sequence's attention mass (Seq.Mass), one per
// layer and KV head, or 0 when the model does not report it (ReportsAttentionMass).
func (m *Model) AttentionMassLanes() int {
	if !m.ReportsAttentionMass() {
		return 0
	}
	c := m.ranks[0].cfg
	return c.Layers * c.KVHeads
}

// StreamsLayers reports whether a step calls its Batch.AfterLayer hook: every rank's
// backend copies a layer's blocks out between a step's ops (backend.LayerKVReader), the
// model split by tensor or pipeline or not.
func (m *Model) StreamsLayers() bool {
	for _, s := range m.ranks {
		if _, ok := s.be.(backend.LayerKVReader); !ok {
			return false
		}
	}
	return true
}

// rankHooks returns each rank's after-layer hook for a step with hook (Batch.AfterLayer):
// rank r's, called with the index of one of its layers, calls hook with that layer's piece
// (KVCache.LayerPieces). It returns nil when hook is nil or the model cannot stream layers.
func (m *Model) rankHooks(hook LayerHook, kv *KVCache) []func(int, LayerReader) error {
	if hook == nil || !m.StreamsLayers() {
		return nil
	}
	pieces := kv.LayerPieces()
	hooks := make([]func(int, LayerReader) error, len(m.ranks))
	for r := range m.ranks {
		var mine []LayerPiece
		for _, p := range pieces {
			if p.Rank == r {
				mine = append(mine, p)
			}
		}
		hooks[r] = func(l int, read LayerReader) error {
			if l < 0 || l >= len(mine) {
				return fmt.Errorf("rank %d: layer %d of its %d", r, l, len(mine))
			}
			return hook(mine[l], read)
		}
	}
	return hooks
}

// KVLayout names how the bytes of a block in the host layout of KVCache.ReadBlocks depend
// on the model's split: "" when they are the unsplit model's (not split, or split by
// pipeline only: the stages' layers in order), else "tpT-ppP" (split by tensor: each rank's
// part holds its own KV heads, the ranks' parts in rank order). Blocks move only between
// caches of one layout.
func (m *Model) KVLayout() string {
	if m.par.Tensor <= 1 {
		return ""
	}
	return fmt.Sprintf("tp%d-pp%d", m.par.Tensor, max(m.par.Pipeline, 1))
}

// logitsRank returns the rank that computes the logits: the last stage's first.
func (m *Model) logitsRank() int { return (m.par.Pipeline - 1) * m.par.Tensor }

// check validates the batch and the cache before a step.
func (m *Model) check(b *Batch, kv *KVCache) error {
	if err := kv.fits(m); err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	if err := b.check(m.cfg.VocabSize, kv); err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	if err := m.failed(); err != nil {
		return fmt.Errorf("forward: an earlier step of the split model failed: %w", err)
	}
	for i, s := range b.Seqs {
		if s.Adapter != nil && m.ranks[0].lora == nil {
			return fmt.Errorf("forward: sequence %d names adapter %q, but LoRA is not enabled (Model.EnableLoRA)", i, s.Adapter.Name)
		}
		if s.Mass == nil {
			continue
		}
		if !m.ReportsAttentionMass() {
			return fmt.Errorf("forward: attention mass asked of backend %s with %d ranks: only a backend that reports it, the model not split", m.ranks[0].be.Name(), len(m.ranks))
		}
	}
	return nil
}

// run runs a checked batch, writing the rows of b.LogitsIndices to out, with the rows'
// vocabulary masks from masks (nil: none).
func (m *Model) run(b *Batch, kv *KVCache, out stepOut, masks MaskFunc) error {
	if len(m.ranks) == 1 {
		s := m.ranks[0]
		if err := s.prepare(b, kv.BlockSize); err != nil {
			return err
		}
		if hooks := m.rankHooks(b.AfterLayer, kv); hooks != nil {
			s.afterLayer = hooks[0]
			defer func() { s.afterLayer = nil }()
		}
		return s.run(kv.parts[0], out, masks)
	}
	return m.runSplit(b, kv, out, masks)
}
