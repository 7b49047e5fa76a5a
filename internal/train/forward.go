package train

import (
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// layerTape keeps what one block's backward pass needs from its forward pass.
type layerTape struct {
	x                []float32 // the block's input (residual stream)
	a, aInv          []float32 // attention norm output and its rows' 1/rms
	q, k, v          []float32 // projections, q and k after rotary embedding
	probs            []float32 // attention weights
	o                []float32 // attention output before Wo
	x2               []float32 // residual stream after attention
	b, bInv          []float32 // MLP norm output and 1/rms
	gate, up, hidden []float32 // MLP: gate and up projections, silu(gate)*up
}

// tape is a forward pass over one batch, kept for its backward pass.
type tape struct {
	tokens   []int32
	seqs, T  int
	layers   []layerTape
	xf       []float32 // final residual stream
	f, fInv  []float32 // final norm output and 1/rms
	logits   []float32 // [n][vocab]
	cos, sin []float32
}

// forward runs m over seqs sequences of T tokens each, laid end to end in tokens, and
// returns the tape holding the logits ([seqs*T][vocab]) and the activations.
func (m *Model) forward(p *cpu.Pool, tokens []int32, seqs, T int) *tape {
	c := m.Config
	n, d, hd := seqs*T, c.Dim, c.HeadDim()
	qw, kw := c.Heads*hd, c.KVHeads*hd
	eps := float32(c.NormEps)
	tp := &tape{tokens: tokens, seqs: seqs, T: T}
	tp.cos, tp.sin = ropeTables(T, hd, c.RopeTheta)
	shape := attnShape{seqs: seqs, seqLen: T, heads: c.Heads, kvHeads: c.KVHeads, hd: hd}
	x := make([]float32, n*d)
	embed(x, m.Embed, tokens, d)
	for i := range m.Layers {
		l := &m.Layers[i]
		lt := layerTape{x: x,
			a: make([]float32, n*d), aInv: make([]float32, n),
			q: make([]float32, n*qw), k: make([]float32, n*kw), v: make([]float32, n*kw),
			probs: make([]float32, seqs*c.Heads*T*T), o: make([]float32, n*qw),
			b: make([]float32, n*d), bInv: make([]float32, n),
			gate: make([]float32, n*c.Hidden), up: make([]float32, n*c.Hidden), hidden: make([]float32, n*c.Hidden),
		}
		rmsNorm(lt.a, lt.aInv, x, l.AttnNorm, n, d, eps)
		linear(p, lt.q, lt.a, l.Wq, n, d, qw)
		linear(p, lt.k, lt.a, l.Wk, n, d, kw)
		linear(p, lt.v, lt.a, l.Wv, n, d, kw)
		rope(lt.q, n, T, c.Heads, hd, tp.cos, tp.sin, false)
		rope(lt.k, n, T, c.KVHeads, hd, tp.cos, tp.sin, false)
		attention(p, lt.o, lt.probs, lt.q, lt.k, lt.v, shape)
		x2 := make([]float32, n*d)
		linear(p, x2, lt.o, l.Wo, n, qw, d)
		axpy(x2, x, 1)
		lt.x2 = x2
		rmsNorm(lt.b, lt.bInv, x2, l.FFNNorm, n, d, eps)
		linear(p, lt.gate, lt.b, l.Gate, n, d, c.Hidden)
		linear(p, lt.up, lt.b, l.Up, n, d, c.Hidden)
		swiGLU(lt.hidden, lt.gate, lt.up)
		x = make([]float32, n*d)
		linear(p, x, lt.hidden, l.Down, n, c.Hidden, d)
		axpy(x, x2, 1)
		tp.layers = append(tp.layers, lt)
	}
	tp.xf = x
	tp.f, tp.fInv = make([]float32, n*d), make([]float32, n)
	rmsNorm(tp.f, tp.fInv, x, m.OutNorm, n, d, eps)
	tp.logits = make([]float32, n*c.Vocab)
	linear(p, tp.logits, tp.f, m.head(), n, d, c.Vocab)
	return tp
}

// backward adds into grad (a model of the same shapes) the gradient of the loss whose
// gradient with respect to the logits is dlogits ([n][vocab]).
func (m *Model) backward(p *cpu.Pool, tp *tape, dlogits []float32, grad *Model) {
	c := m.Config
	n, d, hd := tp.seqs*tp.T, c.Dim, c.HeadDim()
	qw, kw := c.Heads*hd, c.KVHeads*hd
	shape := attnShape{seqs: tp.seqs, seqLen: tp.T, heads: c.Heads, kvHeads: c.KVHeads, hd: hd}

	df := make([]float32, n*d)
	linearBackward(p, df, grad.head(), dlogits, tp.f, m.head(), n, d, c.Vocab)
	dx := make([]float32, n*d)
	rmsNormBackward(dx, grad.OutNorm, df, tp.xf, tp.fInv, m.OutNorm, n, d)
	for i := len(m.Layers) - 1; i >= 0; i-- {
		l, g, lt := &m.Layers[i], &grad.Layers[i], &tp.layers[i]
		// MLP half: x = x2 + Down(swiGLU(Gate b, Up b)), b = norm(x2).
		dh := make([]float32, n*c.Hidden)
		linearBackward(p, dh, g.Down, dx, lt.hidden, l.Down, n, c.Hidden, d)
		dgate, dup := make([]float32, n*c.Hidden), make([]float32, n*c.Hidden)
		swiGLUBackward(dgate, dup, dh, lt.gate, lt.up)
		db, db2 := make([]float32, n*d), make([]float32, n*d)
		linearBackward(p, db, g.Gate, dgate, lt.b, l.Gate, n, d, c.Hidden)
		linearBackward(p, db2, g.Up, dup, lt.b, l.Up, n, d, c.Hidden)
		axpy(db, db2, 1)
		dx2 := db2 // reuse: the norm's input gradient, then plus the residual's
		rmsNormBackward(dx2, g.FFNNorm, db, lt.x2, lt.bInv, l.FFNNorm, n, d)
		axpy(dx2, dx, 1)
		// Attention half: x2 = x + Wo(attention(rope(Wq a), rope(Wk a), Wv a)), a = norm(x).
		do := make([]float32, n*qw)
		linearBackward(p, do, g.Wo, dx2, lt.o, l.Wo, n, qw, d)
		dq, dk, dv := make([]float32, n*qw), make([]float32, n*kw), make([]float32, n*kw)
		attentionBackward(p, dq, dk, dv, do, lt.probs, lt.q, lt.k, lt.v, shape)
		rope(dq, n, tp.T, c.Heads, hd, tp.cos, tp.sin, true)
		rope(dk, n, tp.T, c.KVHeads, hd, tp.cos, tp.sin, true)
		da, da2 := make([]float32, n*d), make([]float32, n*d)
		linearBackward(p, da, g.Wq, dq, lt.a, l.Wq, n, d, qw)
		linearBackward(p, da2, g.Wk, dk, lt.a, l.Wk, n, d, kw)
		axpy(da, da2, 1)
		linearBackward(p, da2, g.Wv, dv, lt.a, l.Wv, n, d, kw)
		axpy(da, da2, 1)
		dxIn := da2
		rmsNormBackward(dxIn, g.AttnNorm, da, lt.x, lt.aInv, l.AttnNorm, n, d)
		axpy(dxIn, dx2, 1)
		dx = dxIn
	}
	embedBackward(grad.Embed, dx, tp.tokens, d)
}
