package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// weights are a model's tensors bound by name. Matrices point into the model file's mapped
// data (no copies); only the small vectors (norms, biases, rope divisors) are decoded to
// float32.
type weights struct {
	embd    cpu.Weight // token_embd.weight [vocab][dim]
	outNorm []float32
	output  cpu.Weight // output.weight, or token_embd.weight when tied
	// ropeDivisors divides each rotary frequency (Llama 3 scaling); nil when absent.
	ropeDivisors []float32
	layers       []layerWeights
}

// layerWeights are one transformer block's tensors.
type layerWeights struct {
	attnNorm, ffnNorm   []float32
	q, k, v, o          cpu.Weight
	qBias, kBias, vBias []float32 // nil without QKV bias
	qNorm, kNorm        []float32 // nil without QK norm

	// Dense MLP.
	gate, up, down cpu.Weight

	// Mixture of experts: a router and one MLP per expert, and the optional shared expert
	// with its sigmoid gate.
	router               cpu.Weight
	experts              []expertWeights
	shGate, shUp, shDown cpu.Weight
	shGateInp            []float32
	hasShared            bool
}

// expertWeights are one routed expert's MLP matrices.
type expertWeights struct {
	gate, up, down cpu.Weight
}

// bindWeights looks up every tensor the config calls for and checks its shape.
func bindWeights(m *format.Model) (*weights, error) {
	c := m.Config
	b := binder{m: m}
	w := &weights{}
	w.embd = b.matrix("token_embd.weight", c.VocabSize, c.Dim)
	w.outNorm = b.vector("output_norm.weight", c.Dim)
	if c.TiedEmbeddings {
		w.output = w.embd
	} else {
		w.output = b.matrix("output.weight", c.VocabSize, c.Dim)
	}
	if _, ok := m.Tensor("rope_freqs.weight"); ok {
		w.ropeDivisors = b.vector("rope_freqs.weight", c.RopeDim/2)
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w.layers = make([]layerWeights, c.Layers)
	for l := range w.layers {
		p := fmt.Sprintf("blk.%d.", l)
		lw := &w.layers[l]
		lw.attnNorm = b.vector(p+"attn_norm.weight", c.Dim)
		lw.ffnNorm = b.vector(p+"ffn_norm.weight", c.Dim)
		lw.q = b.matrix(p+"attn_q.weight", q, c.Dim)
		lw.k = b.matrix(p+"attn_k.weight", kv, c.Dim)
		lw.v = b.matrix(p+"attn_v.weight", kv, c.Dim)
		lw.o = b.matrix(p+"attn_output.weight", c.Dim, q)
		if c.QKVBias {
			lw.qBias = b.vector(p+"attn_q.bias", q)
			lw.kBias = b.vector(p+"attn_k.bias", kv)
			lw.vBias = b.vector(p+"attn_v.bias", kv)
		}
		if c.QKNorm {
			lw.qNorm = b.vector(p+"attn_q_norm.weight", c.HeadDim)
			lw.kNorm = b.vector(p+"attn_k_norm.weight", c.HeadDim)
		}
		if c.Experts == 0 {
			lw.gate = b.matrix(p+"ffn_gate.weight", c.FFNDim, c.Dim)
			lw.up = b.matrix(p+"ffn_up.weight", c.FFNDim, c.Dim)
			lw.down = b.matrix(p+"ffn_down.weight", c.Dim, c.FFNDim)
			continue
		}
		lw.router = b.matrix(p+"ffn_gate_inp.weight", c.Experts, c.Dim)
		f := c.ExpertFFNDim
		lw.experts = make([]expertWeights, c.Experts)
		if _, stacked := m.Tensor(p + "ffn_gate_exps.weight"); stacked {
			gate := b.stacked(p+"ffn_gate_exps.weight", c.Experts, f, c.Dim)
			up := b.stacked(p+"ffn_up_exps.weight", c.Experts, f, c.Dim)
			down := b.stacked(p+"ffn_down_exps.weight", c.Experts, c.Dim, f)
			for e := range lw.experts {
				if b.err == nil {
					lw.experts[e] = expertWeights{gate: gate[e], up: up[e], down: down[e]}
				}
			}
		} else {
			for e := range lw.experts {
				lw.experts[e] = expertWeights{
					gate: b.matrix(fmt.Sprintf("%sffn_gate.%d.weight", p, e), f, c.Dim),
					up:   b.matrix(fmt.Sprintf("%sffn_up.%d.weight", p, e), f, c.Dim),
					down: b.matrix(fmt.Sprintf("%sffn_down.%d.weight", p, e), c.Dim, f),
				}
			}
		}
		if s := c.SharedExpertFFN; s > 0 {
			lw.hasShared = true
			lw.shGate = b.matrix(p+"ffn_gate_shexp.weight", s, c.Dim)
			lw.shUp = b.matrix(p+"ffn_up_shexp.weight", s, c.Dim)
			lw.shDown = b.matrix(p+"ffn_down_shexp.weight", c.Dim, s)
			lw.shGateInp = b.vector(p+"ffn_gate_inp_shexp.weight", c.Dim)
		}
	}
	if b.err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Path, b.err)
	}
	return w, nil
}

// binder looks tensors up and remembers the first error, so that bindWeights reads as a
// list of names.
type binder struct {
	m   *format.Model
	err error
}

func (b *binder) tensor(name string, shape ...int) *format.Tensor {
	if b.err != nil {
		return nil
	}
	t, ok := b.m.Tensor(name)
	if !ok {
		b.err = fmt.Errorf("tensor %q is missing", name)
		return nil
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if t.Elements() != n || t.Shape[len(t.Shape)-1] != shape[len(shape)-1] {
		b.err = fmt.Errorf("tensor %q: shape %v, want %v", name, t.Shape, shape)
		return nil
	}
	if err := t.Check(); err != nil {
		b.err = err
		return nil
	}
	return t
}

// matrix binds a rows x cols weight in place.
func (b *binder) matrix(name string, rows, cols int) cpu.Weight {
	t := b.tensor(name, rows, cols)
	if t == nil {
		return cpu.Weight{}
	}
	if !quant.Supported(t.Type) {
		b.err = fmt.Errorf("tensor %q: type %s is not supported", name, t.Type)
		return cpu.Weight{}
	}
	return cpu.Weight{Type: t.Type, Rows: rows, Cols: cols, Data: t.Data}
}

// stacked binds an [n][rows][cols] tensor as n weights sharing its data.
func (b *binder) stacked(name string, n, rows, cols int) []cpu.Weight {
	t := b.tensor(name, n, rows, cols)
	if t == nil {
		return nil
	}
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		b.err = fmt.Errorf("tensor %q: %w", name, err)
		return nil
	}
	out := make([]cpu.Weight, n)
	per := rows * rb
	for e := range out {
		out[e] = cpu.Weight{Type: t.Type, Rows: rows, Cols: cols, Data: t.Data[e*per : (e+1)*per]}
	}
	return out
}

// vector decodes a 1-D tensor of n values to float32.
func (b *binder) vector(name string, n int) []float32 {
	t := b.tensor(name, n)
	if t == nil {
		return nil
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
		b.err = fmt.Errorf("tensor %q: %w", name, err)
		return nil
	}
	return out
}

// rowBytes returns the bytes of one row of w.
func rowBytes(w cpu.Weight) int {
	rb, _ := w.Type.RowBytes(w.Cols)
	return rb
}

// dequantRow decodes row r of w into dst (len w.Cols).
func dequantRow(w cpu.Weight, r int, dst []float32) error {
	rb := rowBytes(w)
	if r < 0 || r >= w.Rows {
		return fmt.Errorf("row %d outside %d rows", r, w.Rows)
	}
	return quant.Dequantize(w.Type, w.Data[r*rb:(r+1)*rb], dst[:w.Cols])
}
