package model

import (
	"fmt"
	"math"
	"sort"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Reference is the single-sequence fp32 forward pass written for clarity, in the manner of
// llama2.c's run.c: one token at a time, each weight row dequantized as it is used, a
// contiguous KV cache, and attention as a plain softmax over all past positions. It is the
// oracle the fast path is tested against; it is slow on purpose.
type Reference struct {
	cfg  format.Config
	w    *weights[*format.Tensor]
	rope *rope
	// ropeLocal rotates the windowed layers when their frequencies differ (Gemma 3).
	ropeLocal *rope
	// Keys and values per layer, position after position: [pos][KVHeads*HeadDim].
	keys, values [][]float32
	pos          int
	row          []float32 // scratch for one dequantized weight row
}

// NewReference prepares the reference path for an opened model.
func NewReference(m *format.Model) (*Reference, error) {
	w, err := bindWeights(m, m.Config, m.Path, wholeModel, fileTensor)
	if err != nil {
		return nil, err
	}
	r, err := newRope(m.Config, w.ropeDivisors)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Path, err)
	}
	c := m.Config
	var local *rope
	if lc, ok := localRopeConfig(c); ok {
		if local, err = newRope(lc, nil); err != nil {
			return nil, fmt.Errorf("model %s: local layers: %w", m.Path, err)
		}
	}
	return &Reference{cfg: c, w: w, rope: r, ropeLocal: local,
		keys: make([][]float32, c.Layers), values: make([][]float32, c.Layers),
		row: make([]float32, max(c.Dim, c.Heads*c.HeadDim, c.FFNDim, c.ExpertFFNDim, c.SharedExpertFFN, c.Heads*c.VHeadDim))}, nil
}

// Pos returns the number of tokens processed so far: the context index of the next token
// (and its position, unless ForwardAt says otherwise).
func (r *Reference) Pos() int { return r.pos }

// Reset forgets the sequence, so that the next token is at position 0.
func (r *Reference) Reset() {
	r.pos = 0
	for l := range r.keys {
		r.keys[l], r.values[l] = r.keys[l][:0], r.values[l][:0]
	}
}

// Forward runs one token at the next position and returns the logits of the next token.
func (r *Reference) Forward(token int) ([]float32, error) { return r.ForwardAt(token, r.pos) }

// ForwardAt runs one token appended to the context, rotated by RoPE as at position pos,
// and returns the logits of the next token: the token attends to every token before it
// and itself, whatever their positions.
func (r *Reference) ForwardAt(token, pos int) ([]float32, error) {
	c := r.cfg
	if token < 0 || token >= c.VocabSize {
		return nil, fmt.Errorf("reference: token %d outside the vocabulary of %d", token, c.VocabSize)
	}
	if pos < 0 {
		return nil, fmt.Errorf("reference: negative position %d", pos)
	}
	hd, kvDim := c.HeadDim, c.KVHeads*c.HeadDim
	x := make([]float32, c.Dim)
	r.dequantRow(r.w.embd, token, x)
	if c.EmbedScale > 0 {
		for i := range x {
			x[i] *= float32(c.EmbedScale)
		}
	}
	globalRope := r.rope
	cosG := make([]float32, r.rope.dim/2)
	sinG := make([]float32, r.rope.dim/2)
	r.rope.angles(pos, cosG, sinG)
	cosL, sinL := cosG, sinG
	if r.ropeLocal != nil {
		cosL, sinL = make([]float32, r.ropeLocal.dim/2), make([]float32, r.ropeLocal.dim/2)
		r.ropeLocal.angles(pos, cosL, sinL)
	}
	eps := float32(c.NormEps)

	for l := range r.w.layers {
		lw := &r.w.layers[l]
		// A windowed layer sees the last window context entries, rotated by its own
		// frequencies when it has them.
		window := c.LayerWindow(l)
		first := 0
		if window > 0 {
			first = max(0, r.pos-window+1)
		}
		rp, cos, sin := globalRope, cosG, sinG
		if window > 0 && r.ropeLocal != nil {
			rp, cos, sin = r.ropeLocal, cosL, sinL
		}
		// Attention.
		xb := r.preNorm(x, lw.attnNorm)
		if c.MLA() {
			addInto(x, r.mlaAttention(l, lw, xb, cos, sin))
			r.feedForward(l, lw, x)
			continue
		}
		q := r.linear(lw, "attn_q", lw.q, xb)
		k := r.linear(lw, "attn_k", lw.k, xb)
		v := r.linear(lw, "attn_v", lw.v, xb)
		if c.QKVBias {
			addInto(q, r.vector(lw.qBias))
			addInto(k, r.vector(lw.kBias))
			addInto(v, r.vector(lw.vBias))
		}
		if c.QKNormFull {
			// OLMo 2: one norm over all the heads of each projection.
			q, k = rmsNorm(q, r.vector(lw.qNorm), eps), rmsNorm(k, r.vector(lw.kNorm), eps)
		}
		for h := range c.Heads {
			qh := q[h*hd : (h+1)*hd]
			if c.QKNorm && !c.QKNormFull {
				copy(qh, rmsNorm(qh, r.vector(lw.qNorm), eps))
			}
			rp.apply(qh, cos, sin)
		}
		for h := range c.KVHeads {
			kh := k[h*hd : (h+1)*hd]
			if c.QKNorm && !c.QKNormFull {
				copy(kh, rmsNorm(kh, r.vector(lw.kNorm), eps))
			}
			rp.apply(kh, cos, sin)
		}
		r.keys[l] = append(r.keys[l], k...)
		r.values[l] = append(r.values[l], v...)

		att := make([]float32, c.Heads*hd)
		group := c.Heads / c.KVHeads
		scale := float64(attentionScale(c))
		scores := make([]float64, r.pos+1)
		for h := range c.Heads {
			qh := q[h*hd : (h+1)*hd]
			off := (h / group) * hd
			for t := first; t <= r.pos; t++ {
				kt := r.keys[l][t*kvDim+off:][:hd]
				scores[t] = dot64(qh, kt) * scale
				if sc := c.AttnSoftcap; sc > 0 {
					scores[t] = sc * math.Tanh(scores[t]/sc)
				}
			}
			softmax64(scores[first:])
			out := att[h*hd : (h+1)*hd]
			for i := range out {
				var s float64
				for t := first; t <= r.pos; t++ {
					s += scores[t] * float64(r.values[l][t*kvDim+off+i])
				}
				out[i] = float32(s)
			}
		}
		addInto(x, r.halfOut(r.linear(lw, "attn_output", lw.o, att), lw.attnPostNorm))

		r.feedForward(l, lw, x)
	}
	x = rmsNorm(x, r.vector(r.w.outNorm), eps)
	r.pos++
	logits := r.matVec(r.w.output, x)
	if ls := c.LogitScale; ls > 0 {
		for i := range logits {
			logits[i] *= float32(ls)
		}
	}
	if sc := c.FinalSoftcap; sc > 0 {
		for i, v := range logits {
			logits[i] = float32(sc * math.Tanh(float64(v)/sc))
		}
	}
	return logits, nil
}

// feedForward adds the feed-forward half of block l to the residual stream x: the dense
// MLP, or the mixture of experts of an MoE layer.
func (r *Reference) feedForward(l int, lw *layerWeights[*format.Tensor], x []float32) {
	xb := r.preNorm(x, lw.ffnNorm)
	if r.cfg.MoELayer(l) {
		addInto(x, r.halfOut(r.moe(lw, xb), nil))
		return
	}
	addInto(x, r.halfOut(r.mlp(lw, lw.gate, lw.up, lw.down, xb), lw.ffnPostNorm))
}

// preNorm returns x RMS-normalized by a block's pre-norm weight, or a copy of x for a
// block without pre-norms (OLMo 2).
func (r *Reference) preNorm(x []float32, weight *format.Tensor) []float32 {
	if r.cfg.NoPreNorms {
		return append([]float32(nil), x...)
	}
	return rmsNorm(x, r.vector(weight), float32(r.cfg.NormEps))
}

// halfOut returns a half-block's output x as it joins the residual stream: RMS-normalized
// by the post-norm weight when there is one (Gemma), times the residual multiplier
// (Granite).
func (r *Reference) halfOut(x []float32, postNorm *format.Tensor) []float32 {
	if postNorm != nil {
		x = rmsNorm(x, r.vector(postNorm), float32(r.cfg.NormEps))
	}
	if rs := r.cfg.ResidualScale; rs > 0 {
		for i := range x {
			x[i] *= float32(rs)
		}
	}
	return x
}

// mlp is the SwiGLU feed-forward, down(silu(gate x) * up x), or GeGLU with
// gelu_tanh in place of silu. lw, when set, is the layer whose dense MLP it is (for its
// factorized matrices).
func (r *Reference) mlp(lw *layerWeights[*format.Tensor], gate, up, down *format.Tensor, x []float32) []float32 {
	if lw == nil {
		lw = &layerWeights[*format.Tensor]{}
	}
	g := r.linear(lw, "ffn_gate", gate, x)
	u := r.linear(lw, "ffn_up", up, x)
	for i := range g {
		if r.cfg.Activation == geluTanh {
			v := float64(g[i])
			g[i] = float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))) * float64(u[i]))
			continue
		}
		g[i] = silu(g[i]) * u[i]
	}
	return r.linear(lw, "ffn_down", down, g)
}

// moe routes x to the top ExpertsUsed experts by softmax router probability (renormalized
// over the chosen ones when NormTopKProbs) and sums their weighted outputs (times
// ExpertScale when set), plus the shared expert (gated by a sigmoid unless DeepSeek's)
// when the model has one.
func (r *Reference) moe(lw *layerWeights[*format.Tensor], x []float32) []float32 {
	c := r.cfg
	probs64 := make([]float64, c.Experts)
	for e, v := range r.matVec(lw.router, x) {
		probs64[e] = float64(v)
	}
	var chosen []int
	if c.ExpertSigmoid {
		chosen = r.sigmoidRoute(lw, probs64)
	} else {
		softmax64(probs64)
		chosen = topExperts(probs64, c.ExpertsUsed)
	}
	var sum float64
	for _, e := range chosen {
		sum += probs64[e]
	}
	out := make([]float32, c.Dim)
	for _, e := range chosen {
		wgt := probs64[e]
		if c.NormTopKProbs {
			wgt /= sum
		}
		if c.ExpertScale > 0 {
			wgt *= c.ExpertScale
		}
		ew := lw.experts[e]
		for i, v := range r.mlp(nil, ew.gate, ew.up, ew.down, x) {
			out[i] += float32(wgt) * v
		}
	}
	if c.SharedExpertFFN > 0 {
		g := float32(1)
		if c.SharedExpertGated() {
			g = sigmoid(float32(dot64(r.vector(lw.shGateInp), x)))
		}
		for i, v := range r.mlp(nil, lw.shGate, lw.shUp, lw.shDown, x) {
			out[i] += g * v
		}
	}
	return out
}

// sigmoidRoute is DeepSeek-V3's routing: it replaces the router logits by their sigmoid
// scores and returns the chosen experts, best first: the ExpertsUsed best by score plus
// the layer's selection bias, among the experts of the ExpertGroupsUsed groups whose two
// best biased scores sum highest (all experts without groups).
func (r *Reference) sigmoidRoute(lw *layerWeights[*format.Tensor], logits []float64) []int {
	c := r.cfg
	biased := make([]float64, len(logits))
	for e, v := range logits {
		logits[e] = 1 / (1 + math.Exp(-v))
		biased[e] = logits[e]
	}
	if lw.expBias != nil {
		for e, b := range r.vector(lw.expBias) {
			biased[e] += float64(b)
		}
	}
	if g := c.ExpertGroups; g > 1 {
		per := c.Experts / g
		groupScore := make([]float64, g)
		for gr := range g {
			best := topExperts(biased[gr*per:(gr+1)*per], 2)
			groupScore[gr] = biased[gr*per+best[0]] + biased[gr*per+best[1]]
		}
		keep := make([]bool, g)
		for _, gr := range topExperts(groupScore, c.ExpertGroupsUsed) {
			keep[gr] = true
		}
		for e := range biased {
			if !keep[e/per] {
				biased[e] = math.Inf(-1)
			}
		}
	}
	return topExperts(biased, c.ExpertsUsed)
}

// topExperts returns the indices of the k largest probabilities, largest first (the lower
// index first on ties).
func topExperts(p []float64, k int) []int {
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	return idx[:k]
}

// matVec returns w·x, dequantizing one row of w at a time and summing in float64.
func (r *Reference) matVec(w *format.Tensor, x []float32) []float32 {
	rows, cols := w.Rows()
	out := make([]float32, rows)
	row := r.row[:cols]
	for i := range out {
		r.dequantRow(w, i, row)
		out[i] = float32(dot64(row, x))
	}
	return out
}

// dequantRow decodes row i of w into dst.
func (r *Reference) dequantRow(w *format.Tensor, i int, dst []float32) {
	_, cols := w.Rows()
	rb, err := w.Type.RowBytes(cols)
	if err == nil {
		err = quant.Dequantize(w.Type, w.Data[i*rb:(i+1)*rb], dst[:cols])
	}
	if err != nil {
		// Shapes and types were checked when the weights were bound; a failure here is a bug.
		panic(fmt.Sprintf("reference: tensor %q row %d: %v", w.Name, i, err))
	}
}

// vector returns the values of a 1-D weight as float32.
func (r *Reference) vector(w *format.Tensor) []float32 {
	out := make([]float32, w.Elements())
	r.dequantRow(w, 0, out)
	return out
}

func rmsNorm(x, weight []float32, eps float32) []float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+float64(eps))
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(float64(v)*inv) * weight[i]
	}
	return out
}

func dot64(a, b []float32) float64 {
	var s float64
	for i, v := range a {
		s += float64(v) * float64(b[i])
	}
	return s
}

func softmax64(x []float64) {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	var sum float64
	for i, v := range x {
		x[i] = math.Exp(v - m)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

func addInto(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }
