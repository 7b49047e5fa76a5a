// Package model runs transformer models of the Llama family (Llama 2/3, Mistral, Mixtral,
// Qwen2, Qwen3, Qwen2-MoE) on any backend that implements the op set of package backend.
//
// Model is the fast path: weights bound by name from an opened format.Model and uploaded
// once, and a batched Forward over a paged KV cache, written once against the backend's
// small op set. Reference is the slow single-sequence fp32 path that tests use as the
// oracle. Session drives a Model for one sequence (run, chat, benchmarks).
package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Options configures a Model.
type Options struct {
	// Backend runs the model's ops; nil makes a CPU backend of Threads threads, owned by
	// the Model and closed by Close.
	Backend backend.Backend
	// Threads is the size of the CPU backend made when Backend is nil (< 1: all cores).
	Threads int
	// Progress, when set, is told the bytes of weights uploaded so far (for a progress bar
	// while weights are copied to a device).
	Progress func(done, total int64)
}

// Model is a transformer bound to its weights, ready to run batches. A Model runs one
// Forward at a time (its activation buffers are reused from step to step); it is not safe
// for concurrent use.
type Model struct {
	cfg         format.Config
	be          backend.Backend
	ownsBackend bool
	w           *weights[backend.Tensor]
	experts     [][]backend.Expert // per layer, for mixtures of experts
	rope        backend.Rope
	scale       float32 // attention scores' scale, 1/sqrt(HeadDim)

	meta backend.StepMeta // the step being run, its buffers reused
	pad  decodePad        // a padded decode step's per-token arrays
	act  stepBuffers
}

// New binds the weights of an opened model and uploads them to the backend. The
// format.Model must stay open while the Model is used.
func New(m *format.Model, opt Options) (*Model, error) {
	md := &Model{cfg: m.Config, be: opt.Backend, scale: float32(1 / math.Sqrt(float64(m.Config.HeadDim)))}
	if md.be == nil {
		md.be, md.ownsBackend = cpubackend.New(opt.Threads), true
	}
	if err := md.be.Run(func() error { return md.upload(m, opt.Progress) }); err != nil {
		md.Close()
		return nil, err
	}
	return md, nil
}

// upload binds and uploads the weights and the rotary frequencies (inside Run), telling
// progress (when set) the bytes done.
func (md *Model) upload(m *format.Model, progress func(done, total int64)) error {
	send := md.be.UploadWeight
	if progress != nil {
		total, done := m.Bytes(), int64(0)
		send = func(t *format.Tensor) (backend.Tensor, error) {
			w, err := md.be.UploadWeight(t)
			done += int64(len(t.Data))
			progress(done, total)
			return w, err
		}
	}
	w, err := bindWeights(m, send)
	if err != nil {
		return err
	}
	r, err := newRope(m.Config, w.ropeDivisors)
	if err != nil {
		return fmt.Errorf("model %s: %w", m.Path, err)
	}
	data := make([]byte, 0, 4*len(r.invFreq))
	for _, f := range r.invFreq {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(f))
	}
	inv, err := md.be.UploadWeight(&format.Tensor{Name: "rope inverse frequencies", Type: quant.F32, Shape: []int{len(r.invFreq)}, Data: data})
	if err != nil {
		return fmt.Errorf("model %s: %w", m.Path, err)
	}
	md.w = w
	md.rope = backend.Rope{InvFreq: inv, Dim: r.dim, NeoX: r.neox, MScale: r.mscale}
	md.experts = make([][]backend.Expert, len(w.layers))
	for l, lw := range w.layers {
		for _, e := range lw.experts {
			md.experts[l] = append(md.experts[l], backend.Expert{Gate: e.gate, Up: e.up, Down: e.down})
		}
	}
	return nil
}

// Config returns the model's hyperparameters.
func (m *Model) Config() format.Config { return m.cfg }

// Pool returns the worker pool of the model's CPU backend, or nil when the model runs on
// another backend.
func (m *Model) Pool() *cpu.Pool {
	if cb, ok := m.be.(*cpubackend.Backend); ok {
		return cb.Pool()
	}
	return nil
}

// Close closes the backend when the Model made it. (A backend passed in Options keeps the
// model's tensors until it is closed.)
func (m *Model) Close() {
	if m.ownsBackend {
		m.be.Close()
	}
}

// WeightBytesPerToken returns the bytes of weights one decoded token reads: every matrix
// of every layer (for mixtures of experts only the experts used) and the output
// projection, as the backend holds them. The embedding row is negligible and left out.
func (m *Model) WeightBytesPerToken() int64 {
	var n int64
	for l, lw := range m.w.layers {
		n += tensorBytes(lw.q) + tensorBytes(lw.k) + tensorBytes(lw.v) + tensorBytes(lw.o)
		n += tensorBytes(lw.gate) + tensorBytes(lw.up) + tensorBytes(lw.down)
		if e := m.experts[l]; len(e) > 0 {
			perExpert := tensorBytes(e[0].Gate) + tensorBytes(e[0].Up) + tensorBytes(e[0].Down)
			n += tensorBytes(lw.router) + int64(m.cfg.ExpertsUsed)*perExpert
		}
		n += tensorBytes(lw.shGate) + tensorBytes(lw.shUp) + tensorBytes(lw.shDown)
	}
	return n + tensorBytes(m.w.output)
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
	if err := m.prepare(b, kv); err != nil {
		return nil, err
	}
	var logits []float32
	if len(b.LogitsIndices) > 0 {
		logits = make([]float32, len(b.LogitsIndices)*m.cfg.VocabSize)
	}
	if err := m.be.Run(func() error { return m.forward(kv, len(b.LogitsIndices), logits, nil) }); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return logits, nil
}

// ForwardGreedy runs one step as Forward does but returns, instead of the logits, the
// greedy token of each row named by b.LogitsIndices: the index of the row's largest logit
// (the lowest among ties, NaN never chosen), as sample.Greedy picks it. A backend that
// implements backend.ArgmaxLogits picks them on the device and copies back only the ids.
func (m *Model) ForwardGreedy(b *Batch, kv *KVCache) ([]int32, error) {
	if err := m.prepare(b, kv); err != nil {
		return nil, err
	}
	n := len(b.LogitsIndices)
	ids := make([]int32, n)
	if n == 0 {
		return ids, nil
	}
	err := m.be.Run(func() error {
		if _, ok := m.be.(backend.ArgmaxLogits); ok {
			return m.forward(kv, n, nil, ids)
		}
		logits := make([]float32, n*m.cfg.VocabSize)
		if err := m.forward(kv, n, logits, nil); err != nil {
			return err
		}
		v := m.cfg.VocabSize
		for i := range ids {
			ids[i] = int32(sample.Greedy(logits[i*v : (i+1)*v]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return ids, nil
}

// prepare checks the batch and the cache and fills m.meta, padded to the backend's decode
// bucket when the backend replays decode steps as graphs.
func (m *Model) prepare(b *Batch, kv *KVCache) error {
	if err := kv.fits(m); err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	if err := b.check(m.cfg.VocabSize, kv); err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	b.fillMeta(&m.meta, kv.BlockSize)
	if g, ok := m.be.(backend.StepGrapher); ok {
		m.padDecode(g)
	}
	return nil
}

// graphOwner names the buffers a captured step uses: the model's (weights, activations)
// and the cache's.
type graphOwner struct {
	m  *Model
	kv *KVCache
}

// forward runs the step described by m.meta on the backend (inside Run). The first
// nOut rows of logits are wanted: into logits (F32, nOut x vocabulary) when it is non-nil,
// or as greedy token ids into ids. Every op reads and writes buffers that exist before the
// step, and the final read-back is the only host synchronisation: a device backend can
// replay the ops before it as a graph.
func (m *Model) forward(kv *KVCache, nOut int, logits []float32, ids []int32) error {
	be, eps := m.be, float32(m.cfg.NormEps)
	a, err := m.act.forStep(m, m.meta.NumTokens(), len(m.meta.LogitsIndices))
	if err != nil {
		return err
	}
	st, err := be.UploadStep(&m.meta)
	if err != nil {
		return err
	}
	wantOut := nOut > 0 && (logits != nil || ids != nil)
	ops := func() error {
		if err := be.Embedding(a.x, m.w.embd, st); err != nil {
			return fmt.Errorf("embedding: %w", err)
		}
		for l := range m.w.layers {
			if err := m.layer(l, a, kv, st); err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
		}
		if !wantOut {
			return nil
		}
		// The last block's output joins the residual stream; the final norm follows, and
		// only the rows whose logits are wanted are projected onto the vocabulary.
		if err := be.RMSNormResidual(a.xb, a.x, a.ffnOut, m.w.outNorm, eps); err != nil {
			return fmt.Errorf("output norm: %w", err)
		}
		if err := be.GatherRows(a.last, a.xb, st); err != nil {
			return fmt.Errorf("logits rows: %w", err)
		}
		return nil
	}
	if g, ok := be.(backend.StepGrapher); ok {
		err = g.RunStep(st, graphOwner{m: m, kv: kv}, ops)
	} else {
		err = ops()
	}
	if err != nil || !wantOut {
		return err
	}
	last := a.last
	if nOut < len(m.meta.LogitsIndices) {
		last = last.Rows(nOut)
	}
	if ids != nil {
		err = be.(backend.ArgmaxLogits).LogitsArgmax(ids, last, m.w.output)
	} else {
		err = be.Logits(logits, last, m.w.output)
	}
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// layer runs transformer block l: pre-norm attention, then a pre-norm feed-forward. Each
// half leaves its output in a.ffnOut, which the next fused norm adds to the residual
// stream a.x.
func (m *Model) layer(l int, a *activations, kv *KVCache, st backend.Step) error {
	be, lw, eps := m.be, &m.w.layers[l], float32(m.cfg.NormEps)
	var err error
	if l == 0 {
		err = be.RMSNorm(a.xb, a.x, lw.attnNorm, eps)
	} else {
		err = be.RMSNormResidual(a.xb, a.x, a.ffnOut, lw.attnNorm, eps)
	}
	if err != nil {
		return err
	}
	if err := m.attention(l, a, kv, st); err != nil {
		return err
	}
	if err := be.RMSNormResidual(a.xb, a.x, a.ffnOut, lw.ffnNorm, eps); err != nil {
		return err
	}
	if m.cfg.Experts > 0 {
		return m.moe(l, a)
	}
	return m.mlp(a.ffnOut, a.xb, a, lw.gate, lw.up, lw.down)
}

// attention is the attention half of block l on the normalized rows a.xb: projections,
// (biases, QK norm,) rotary embedding fused with the cache write, paged attention, and the
// output projection into a.ffnOut.
func (m *Model) attention(l int, a *activations, kv *KVCache, st backend.Step) error {
	be, lw, c := m.be, &m.w.layers[l], m.cfg
	if err := be.MatMul(a.q, a.xb, lw.q); err != nil {
		return err
	}
	if err := be.MatMul(a.k, a.xb, lw.k); err != nil {
		return err
	}
	if err := be.MatMul(a.v, a.xb, lw.v); err != nil {
		return err
	}
	if c.QKVBias {
		if err := be.AddBias(a.q, lw.qBias); err != nil {
			return err
		}
		if err := be.AddBias(a.k, lw.kBias); err != nil {
			return err
		}
		if err := be.AddBias(a.v, lw.vBias); err != nil {
			return err
		}
	}
	if c.QKNorm {
		if err := be.HeadNorm(a.q, lw.qNorm, float32(c.NormEps)); err != nil {
			return err
		}
		if err := be.HeadNorm(a.k, lw.kNorm, float32(c.NormEps)); err != nil {
			return err
		}
	}
	if err := be.RopeKVWrite(a.q, a.k, a.v, m.rope, kv.cache, l, st); err != nil {
		return err
	}
	if err := be.Attention(a.att, a.q, kv.cache, l, m.scale, st); err != nil {
		return err
	}
	return be.MatMul(a.ffnOut, a.att, lw.o)
}

// mlp computes the SwiGLU feed-forward out = down(silu(gate·x) * up·x), with a.gate and
// a.up as scratch.
func (m *Model) mlp(out, x backend.Tensor, a *activations, gate, up, down backend.Tensor) error {
	be := m.be
	if err := be.MatMul(a.gate, x, gate); err != nil {
		return err
	}
	if err := be.MatMul(a.up, x, up); err != nil {
		return err
	}
	if err := be.SwiGLU(a.gate, a.gate, a.up); err != nil {
		return err
	}
	return be.MatMul(out, a.gate, down)
}
