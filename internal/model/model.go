// Package model runs transformer models of the Llama family (Llama 2/3, Mistral, Mixtral,
// Qwen2, Qwen3, Qwen2-MoE) on the CPU backend.
//
// Model is the fast path: weights bound by name from an opened format.Model without
// copying, and a batched Forward over a paged KV cache, written once against the backend's
// small op set. Reference is the slow single-sequence fp32 path that tests use as the
// oracle. Session drives a Model for one sequence (run, chat, benchmarks).
package model

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// Options configures a Model.
type Options struct {
	// Pool is the worker pool kernels run on; nil makes one of Threads threads, owned by the
	// Model and closed by Close.
	Pool *cpu.Pool
	// Threads is the size of the pool made when Pool is nil (< 1: all cores).
	Threads int
}

// Model is a transformer bound to its weights, ready to run batches. A Model runs one
// Forward at a time (its scratch buffers are reused from step to step); it is not safe for
// concurrent use.
type Model struct {
	cfg      format.Config
	w        *weights
	rope     *rope
	pool     *cpu.Pool
	ownsPool bool
	s        scratch
}

// New binds the weights of an opened model. The format.Model must stay open while the
// Model is used.
func New(m *format.Model, opt Options) (*Model, error) {
	w, err := bindWeights(m)
	if err != nil {
		return nil, err
	}
	r, err := newRope(m.Config, w.ropeDivisors)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Path, err)
	}
	md := &Model{cfg: m.Config, w: w, rope: r, pool: opt.Pool}
	if md.pool == nil {
		md.pool, md.ownsPool = cpu.NewPool(opt.Threads), true
	}
	return md, nil
}

// Config returns the model's hyperparameters.
func (m *Model) Config() format.Config { return m.cfg }

// Pool returns the worker pool the model runs on.
func (m *Model) Pool() *cpu.Pool { return m.pool }

// Close stops the worker pool when the Model made it.
func (m *Model) Close() {
	if m.ownsPool {
		m.pool.Close()
	}
}

// WeightBytesPerToken returns the bytes of weights one decoded token reads: every matrix
// of every layer (for mixtures of experts only the experts used) and the output
// projection. The embedding row is negligible and left out.
func (m *Model) WeightBytesPerToken() int64 {
	size := func(w cpu.Weight) int64 { return int64(len(w.Data)) }
	var n int64
	for _, lw := range m.w.layers {
		n += size(lw.q) + size(lw.k) + size(lw.v) + size(lw.o)
		n += size(lw.gate) + size(lw.up) + size(lw.down)
		if len(lw.experts) > 0 {
			e := lw.experts[0]
			n += size(lw.router) + int64(m.cfg.ExpertsUsed)*(size(e.gate)+size(e.up)+size(e.down))
		}
		if lw.hasShared {
			n += size(lw.shGate) + size(lw.shUp) + size(lw.shDown)
		}
	}
	return n + size(m.w.output)
}

// scratch holds the activations of one step, grown as batches need.
type scratch struct {
	x, xb, q, k, v, att, ffnOut []float32
	gate, up                    []float32
	cos, sin                    []float32
	ropePos                     []int32
	logitsIn                    []float32
	// Mixture of experts.
	router, moeX, moeOut []float32
}

// grow makes the scratch buffers big enough for n tokens.
func (m *Model) grow(n int) {
	c := m.cfg
	s := &m.s
	ffn := max(c.FFNDim, c.ExpertFFNDim, c.SharedExpertFFN)
	size := func(b *[]float32, k int) {
		if cap(*b) < k {
			*b = make([]float32, k)
		}
		*b = (*b)[:k]
	}
	size(&s.x, n*c.Dim)
	size(&s.xb, n*c.Dim)
	size(&s.ffnOut, n*c.Dim)
	size(&s.q, n*c.Heads*c.HeadDim)
	size(&s.att, n*c.Heads*c.HeadDim)
	size(&s.k, n*c.KVHeads*c.HeadDim)
	size(&s.v, n*c.KVHeads*c.HeadDim)
	size(&s.gate, n*ffn)
	size(&s.up, n*ffn)
	size(&s.cos, n*m.rope.dim/2)
	size(&s.sin, n*m.rope.dim/2)
	if cap(s.ropePos) < n {
		s.ropePos = make([]int32, n)
	}
	s.ropePos = s.ropePos[:n]
	if c.Experts > 0 {
		size(&s.router, n*c.Experts)
		size(&s.moeX, n*c.Dim)
		size(&s.moeOut, n*c.Dim)
	}
}

// Forward runs one step: it writes the keys and values of the batch's tokens into kv at
// their slots, attends each sequence's tokens over its cached context, and returns the
// logits of the rows named by b.LogitsIndices, len(LogitsIndices) x vocabulary, row after
// row. The returned slice is new for each call.
func (m *Model) Forward(b *Batch, kv *KVCache) ([]float32, error) {
	c := m.cfg
	if err := kv.fits(c); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	if err := b.check(c.VocabSize, kv); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	n := len(b.Tokens)
	m.grow(n)
	s := &m.s
	p := m.pool
	dim, hd := c.Dim, c.HeadDim
	eps := float32(c.NormEps)

	for t, tok := range b.Tokens {
		if err := dequantRow(m.w.embd, int(tok), s.x[t*dim:(t+1)*dim]); err != nil {
			return nil, fmt.Errorf("forward: embedding: %w", err)
		}
	}
	// Rotation tables for this step's tokens only: row t holds position Positions[t].
	half := m.rope.dim / 2
	for t, pos := range b.Positions {
		m.rope.angles(int(pos), s.cos[t*half:(t+1)*half], s.sin[t*half:(t+1)*half])
		s.ropePos[t] = int32(t)
	}
	style := cpu.RopeInterleaved
	if m.rope.neox {
		style = cpu.RopeNeoX
	}
	scale := float32(1 / math.Sqrt(float64(hd)))

	for l := range m.w.layers {
		lw := &m.w.layers[l]
		var err error
		if l == 0 {
			err = cpu.RMSNorm(p, s.xb, s.x, lw.attnNorm, n, eps)
		} else {
			err = cpu.RMSNormResidual(p, s.xb, s.x, s.ffnOut, lw.attnNorm, n, eps)
		}
		if err != nil {
			return nil, fmt.Errorf("forward: layer %d: %w", l, err)
		}
		if err := m.attention(l, b, kv, style, scale); err != nil {
			return nil, fmt.Errorf("forward: layer %d: %w", l, err)
		}
		if err := cpu.RMSNormResidual(p, s.xb, s.x, s.ffnOut, lw.ffnNorm, n, eps); err != nil {
			return nil, fmt.Errorf("forward: layer %d: %w", l, err)
		}
		if c.Experts > 0 {
			err = m.moe(lw, n)
		} else {
			err = m.mlp(lw.gate, lw.up, lw.down, s.xb, s.ffnOut, n)
		}
		if err != nil {
			return nil, fmt.Errorf("forward: layer %d: %w", l, err)
		}
	}
	return m.logits(b.LogitsIndices)
}

// attention runs the attention half of layer l: projections, rotary embedding, cache
// write, paged attention per sequence, and the output projection into s.ffnOut (which the
// next fused norm adds to the residual).
func (m *Model) attention(l int, b *Batch, kv *KVCache, style cpu.RopeStyle, scale float32) error {
	c := m.cfg
	s := &m.s
	p := m.pool
	lw := &m.w.layers[l]
	n := len(b.Tokens)
	hd := c.HeadDim
	qDim, kvDim := c.Heads*hd, c.KVHeads*hd
	q, k, v := s.q[:n*qDim], s.k[:n*kvDim], s.v[:n*kvDim]
	if err := matMul(p, q, lw.q, s.xb, n); err != nil {
		return err
	}
	if err := matMul(p, k, lw.k, s.xb, n); err != nil {
		return err
	}
	if err := matMul(p, v, lw.v, s.xb, n); err != nil {
		return err
	}
	if lw.qBias != nil {
		addBias(q, lw.qBias)
		addBias(k, lw.kBias)
		addBias(v, lw.vBias)
	}
	eps := float32(c.NormEps)
	if lw.qNorm != nil {
		if err := cpu.RMSNorm(p, q, q, lw.qNorm, n*c.Heads, eps); err != nil {
			return err
		}
		if err := cpu.RMSNorm(p, k, k, lw.kNorm, n*c.KVHeads, eps); err != nil {
			return err
		}
	}
	if err := cpu.Rope(p, q, n, c.Heads, hd, m.rope.dim, s.ropePos, s.cos, s.sin, style); err != nil {
		return err
	}
	if err := cpu.Rope(p, k, n, c.KVHeads, hd, m.rope.dim, s.ropePos, s.cos, s.sin, style); err != nil {
		return err
	}
	if err := cpu.WriteKV(kv.Layers[l], k, v, b.SlotMapping); err != nil {
		return err
	}
	for i, seq := range b.Seqs {
		t0, t1 := seq.QueryStart, seq.QueryStart+seq.QueryLen
		err := cpu.Attention(p, s.att[t0*qDim:t1*qDim], q[t0*qDim:t1*qDim], seq.QueryLen, c.Heads,
			kv.Layers[l], seq.BlockTable, b.Positions[t0:t1], scale)
		if err != nil {
			return fmt.Errorf("sequence %d: %w", i, err)
		}
	}
	return matMul(p, s.ffnOut[:n*c.Dim], lw.o, s.att, n)
}

// mlp computes the SwiGLU feed-forward of n rows of x into out.
func (m *Model) mlp(gate, up, down cpu.Weight, x, out []float32, n int) error {
	s := &m.s
	f := gate.Rows
	g, u := s.gate[:n*f], s.up[:n*f]
	if err := matMul(m.pool, g, gate, x, n); err != nil {
		return err
	}
	if err := matMul(m.pool, u, up, x, n); err != nil {
		return err
	}
	if err := cpu.SwiGLU(m.pool, g, g, u); err != nil {
		return err
	}
	return matMul(m.pool, out[:n*down.Rows], down, g, n)
}

// logits applies the final norm to the rows in idx and projects them onto the vocabulary.
func (m *Model) logits(idx []int) ([]float32, error) {
	c := m.cfg
	s := &m.s
	if len(idx) == 0 {
		return nil, nil
	}
	// The last layer's feed-forward output still has to join the residual stream.
	dim := c.Dim
	if cap(s.logitsIn) < len(idx)*dim {
		s.logitsIn = make([]float32, len(idx)*dim)
	}
	in := s.logitsIn[:len(idx)*dim]
	for j, t := range idx {
		row := in[j*dim : (j+1)*dim]
		copy(row, s.x[t*dim:(t+1)*dim])
		addInto(row, s.ffnOut[t*dim:(t+1)*dim])
	}
	if err := cpu.RMSNorm(m.pool, in, in, m.w.outNorm, len(idx), float32(c.NormEps)); err != nil {
		return nil, fmt.Errorf("forward: output norm: %w", err)
	}
	out := make([]float32, len(idx)*c.VocabSize)
	if err := matMul(m.pool, out, m.w.output, in, len(idx)); err != nil {
		return nil, fmt.Errorf("forward: output: %w", err)
	}
	return out, nil
}

// addBias adds bias to every row of x.
func addBias(x, bias []float32) {
	for off := 0; off < len(x); off += len(bias) {
		addInto(x[off:off+len(bias)], bias)
	}
}
