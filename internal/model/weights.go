package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// weights are a model's tensors bound by name, each held as a T: the file's tensor
// (*format.Tensor) for the reference path, a backend.Tensor uploaded once for the fast
// path. Only the rope divisors, which set up the rotary frequencies, are decoded here.
type weights[T any] struct {
	embd    T // token_embd.weight [vocab][dim]
	outNorm T
	output  T // output.weight, or token_embd.weight when tied
	// ropeDivisors divides each rotary frequency (Llama 3 scaling); nil when absent.
	ropeDivisors []float32
	layers       []layerWeights[T]
	// ranks lists the distinct ranks of the factorized matrices, ascending (lowrank.go).
	ranks []int
}

// layerWeights are one transformer block's tensors. Which of them are set follows the
// config: QKV biases with QKVBias, QK norms with QKNorm, the dense MLP without experts.
type layerWeights[T any] struct {
	attnNorm, ffnNorm   T
	q, k, v, o          T
	qBias, kBias, vBias T
	qNorm, kNorm        T

	// Norms of the attention and MLP outputs (Config.PostNorms: Gemma).
	attnPostNorm, ffnPostNorm T

	// Multi-head latent attention (Config.MLA, mla.go): q's down-projection and its norm
	// (with a q rank), and the reference path's latent projections as the file has them
	// (q above is attn_q_b or attn_q). The fast path binds, in q, k, v and o, the absorbed
	// matrices of mla.go instead, with kvANorm padded to the cache vector.
	qA, qANorm, kvA, kvANorm, kvB T

	// Dense MLP.
	gate, up, down T

	// lowRank holds the matrices of the layer stored factorized ("attn_q", ... "ffn_down";
	// nil when none is), whose dense field above is then unset (lowrank.go).
	lowRank map[string]*factors[T]

	// Mixture of experts: a router and one MLP per expert, and the optional shared expert
	// with its sigmoid gate (set when the config's SharedExpertFFN > 0).
	router               T
	expBias              T // the selection bias of DeepSeek-V3's routing (exp_probs_b.bias)
	experts              []expertWeights[T]
	shGate, shUp, shDown T
	shGateInp            T
}

// expertWeights are one routed expert's MLP matrices.
type expertWeights[T any] struct {
	gate, up, down T
}

// fileTensor keeps a file's tensor as it is: the reference path reads the bytes in place.
func fileTensor(t *format.Tensor) (*format.Tensor, error) { return t, nil }

// source looks a model's tensors up by name: an opened format.Model, or the part of one
// that a rank of a split model holds.
type source interface {
	Tensor(name string) (*format.Tensor, bool)
}

// stageParts says which of a model's ends a part binds: the token embedding (the first
// pipeline stage, or the last one when the output projection is tied to it) and the final
// norm and output projection (the last stage). The whole model binds both.
type stageParts struct {
	embedding, output bool
	// absorbMLA binds the absorbed matrices of multi-head latent attention (the fast
	// path) in place of the file's (mla.go).
	absorbMLA bool
}

// wholeModel binds every tensor.
var wholeModel = stageParts{embedding: true, output: true}

// stageEnds returns the ends a pipeline stage holds: the first stage the embedding, the
// last the final norm and output projection, and the embedding too when the output is
// tied to it.
func stageEnds(first, last, tied bool) stageParts {
	return stageParts{embedding: first || (last && tied), output: last}
}

// bindWeights looks up every tensor config c calls for in m (named path in errors), checks
// its shape and type, and makes it a T with load. parts leaves out the ends a pipeline
// stage does not hold.
func bindWeights[T any](m source, c format.Config, path string, parts stageParts, load func(*format.Tensor) (T, error)) (*weights[T], error) {
	b := binder[T]{m: m, load: load}
	w := &weights[T]{}
	if parts.embedding {
		w.embd = b.matrix("token_embd.weight", c.VocabSize, c.Dim)
	}
	if parts.output {
		w.outNorm = b.vector("output_norm.weight", c.Dim)
		if c.TiedEmbeddings {
			w.output = w.embd
		} else {
			w.output = b.matrix("output.weight", c.VocabSize, c.Dim)
		}
	}
	if t := b.tensor("rope_freqs.weight", c.RopeDim/2); t != nil {
		w.ropeDivisors = b.decode(t)
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w.layers = make([]layerWeights[T], c.Layers)
	for l := range w.layers {
		if b.err != nil {
			break // the first missing or misshapen tensor ends the binding
		}
		p := fmt.Sprintf("blk.%d.", l)
		lw := &w.layers[l]
		if !c.NoPreNorms {
			lw.attnNorm = b.vector(p+"attn_norm.weight", c.Dim)
			lw.ffnNorm = b.vector(p+"ffn_norm.weight", c.Dim)
		}
		if c.PostNorms {
			lw.attnPostNorm = b.vector(p+"post_attention_norm.weight", c.Dim)
			lw.ffnPostNorm = b.vector(p+"post_ffw_norm.weight", c.Dim)
		}
		if c.MLA() {
			b.mla(lw, p, c, parts.absorbMLA)
		} else {
			lw.q = b.linear(lw, p, "attn_q", q, c.Dim)
			lw.k = b.linear(lw, p, "attn_k", kv, c.Dim)
			lw.v = b.linear(lw, p, "attn_v", kv, c.Dim)
			lw.o = b.linear(lw, p, "attn_output", c.Dim, q)
		}
		if c.QKVBias {
			lw.qBias = b.vector(p+"attn_q.bias", q)
			lw.kBias = b.vector(p+"attn_k.bias", kv)
			lw.vBias = b.vector(p+"attn_v.bias", kv)
		}
		if c.QKNorm {
			qn, kn := c.HeadDim, c.HeadDim
			if c.QKNormFull {
				qn, kn = q, kv
			}
			lw.qNorm = b.vector(p+"attn_q_norm.weight", qn)
			lw.kNorm = b.vector(p+"attn_k_norm.weight", kn)
		}
		if !c.MoELayer(l) {
			lw.gate = b.linear(lw, p, "ffn_gate", c.FFNDim, c.Dim)
			lw.up = b.linear(lw, p, "ffn_up", c.FFNDim, c.Dim)
			lw.down = b.linear(lw, p, "ffn_down", c.Dim, c.FFNDim)
			continue
		}
		lw.router = b.matrix(p+"ffn_gate_inp.weight", c.Experts, c.Dim)
		if c.ExpertSigmoid {
			lw.expBias = b.vector(p+"exp_probs_b.bias", c.Experts)
		}
		f := c.ExpertFFNDim
		lw.experts = make([]expertWeights[T], c.Experts)
		if _, stacked := m.Tensor(p + "ffn_gate_exps.weight"); stacked {
			gate := b.stacked(p+"ffn_gate_exps.weight", c.Experts, f, c.Dim)
			up := b.stacked(p+"ffn_up_exps.weight", c.Experts, f, c.Dim)
			down := b.stacked(p+"ffn_down_exps.weight", c.Experts, c.Dim, f)
			for e := range lw.experts {
				if b.err == nil {
					lw.experts[e] = expertWeights[T]{gate: gate[e], up: up[e], down: down[e]}
				}
			}
		} else {
			for e := range lw.experts {
				lw.experts[e] = expertWeights[T]{
					gate: b.matrix(fmt.Sprintf("%sffn_gate.%d.weight", p, e), f, c.Dim),
					up:   b.matrix(fmt.Sprintf("%sffn_up.%d.weight", p, e), f, c.Dim),
					down: b.matrix(fmt.Sprintf("%sffn_down.%d.weight", p, e), c.Dim, f),
				}
			}
		}
		if s := c.SharedExpertFFN; s > 0 {
			lw.shGate = b.matrix(p+"ffn_gate_shexp.weight", s, c.Dim)
			lw.shUp = b.matrix(p+"ffn_up_shexp.weight", s, c.Dim)
			lw.shDown = b.matrix(p+"ffn_down_shexp.weight", c.Dim, s)
			if c.SharedExpertGated() {
				lw.shGateInp = b.vector(p+"ffn_gate_inp_shexp.weight", c.Dim)
			}
		}
	}
	if b.err != nil {
		return nil, fmt.Errorf("model %s: %w", path, b.err)
	}
	w.ranks = factorRanks(w.layers)
	return w, nil
}

// binder looks tensors up and remembers the first error, so that bindWeights reads as a
// list of names.
type binder[T any] struct {
	m    source
	load func(*format.Tensor) (T, error)
	err  error
}

// lookup returns the tensor called name, checked against shape.
func (b *binder[T]) lookup(name string, shape ...int) *format.Tensor {
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
	if !quant.Supported(t.Type) {
		b.err = fmt.Errorf("tensor %q: type %s is not supported", name, t.Type)
		return nil
	}
	return t
}

// tensor returns the tensor called name when the file has it (nil otherwise), checked
// against shape.
func (b *binder[T]) tensor(name string, shape ...int) *format.Tensor {
	if _, ok := b.m.Tensor(name); !ok {
		return nil
	}
	return b.lookup(name, shape...)
}

// bind loads t (nil after an error) as a T with the given shape.
func (b *binder[T]) bind(t *format.Tensor, shape ...int) T {
	var v T
	if t == nil || b.err != nil {
		return v
	}
	if len(t.Shape) != len(shape) {
		t = &format.Tensor{Name: t.Name, Type: t.Type, Shape: shape, Data: t.Data}
	}
	v, b.err = b.load(t)
	return v
}

// matrix binds a rows x cols weight.
func (b *binder[T]) matrix(name string, rows, cols int) T {
	return b.bind(b.lookup(name, rows, cols), rows, cols)
}

// vector binds a 1-D weight of n values.
func (b *binder[T]) vector(name string, n int) T {
	return b.bind(b.lookup(name, n), n)
}

// stacked binds an [n][rows][cols] tensor as n matrices sharing its data.
func (b *binder[T]) stacked(name string, n, rows, cols int) []T {
	t := b.lookup(name, n, rows, cols)
	if t == nil {
		return nil
	}
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		b.err = fmt.Errorf("tensor %q: %w", name, err)
		return nil
	}
	out := make([]T, n)
	per := rows * rb
	for e := range out {
		part := &format.Tensor{Name: fmt.Sprintf("%s[%d]", name, e), Type: t.Type, Shape: []int{rows, cols},
			Data: t.Data[e*per : (e+1)*per]}
		out[e] = b.bind(part, rows, cols)
	}
	return out
}

// decode returns the values of t as float32.
func (b *binder[T]) decode(t *format.Tensor) []float32 {
	if b.err != nil {
		return nil
	}
	out := make([]float32, t.Elements())
	if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
		b.err = fmt.Errorf("tensor %q: %w", t.Name, err)
		return nil
	}
	return out
}
