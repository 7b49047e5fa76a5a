package cpubackend

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Embedding decodes row Tokens[t] of table into row t of out.
func (b *Backend) Embedding(out, table backend.Tensor, st backend.Step) error {
	o, err := activation("embedding", "out", out)
	if err != nil {
		return err
	}
	w, err := matrix("embedding", "table", table)
	if err != nil {
		return err
	}
	s, err := stepOf("embedding", st)
	if err != nil {
		return err
	}
	tokens := s.meta.Tokens
	if o.rows() != len(tokens) || o.cols() != w.Cols {
		return fmt.Errorf("cpu embedding: out %v for %d tokens of %d values", o.shape, len(tokens), w.Cols)
	}
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return fmt.Errorf("cpu embedding: %w", err)
	}
	for t, tok := range tokens {
		if tok < 0 || int(tok) >= w.Rows {
			return fmt.Errorf("cpu embedding: token %d: id %d outside the table's %d rows", t, tok, w.Rows)
		}
		if err := quant.Dequantize(w.Type, w.Data[int(tok)*rb:][:rb], o.f32[t*w.Cols:][:w.Cols]); err != nil {
			return fmt.Errorf("cpu embedding: token %d: %w", t, err)
		}
	}
	return nil
}

// RMSNorm normalizes the rows of x into out.
func (b *Backend) RMSNorm(out, x, weight backend.Tensor, eps float32) error {
	o, xs, w, err := normOperands("rmsnorm", out, x, weight)
	if err != nil {
		return err
	}
	return cpu.RMSNorm(b.pool, o.f32, xs.f32, w.f32, xs.rows(), eps)
}

// RMSNormResidual adds x into residual and normalizes the sums into out.
func (b *Backend) RMSNormResidual(out, residual, x, weight backend.Tensor, eps float32) error {
	o, r, w, err := normOperands("rmsnorm residual", out, residual, weight)
	if err != nil {
		return err
	}
	xs, err := activation("rmsnorm residual", "x", x)
	if err != nil {
		return err
	}
	if err := sameShape("rmsnorm residual", r, xs); err != nil {
		return err
	}
	return cpu.RMSNormResidual(b.pool, o.f32, r.f32, xs.f32, w.f32, r.rows(), eps)
}

// normOperands checks the operands of a row norm: out and x of one shape, weight as long
// as a row.
func normOperands(op string, out, x, weight backend.Tensor) (o, xs, w *tensor, err error) {
	if o, err = activation(op, "out", out); err != nil {
		return nil, nil, nil, err
	}
	if xs, err = activation(op, "x", x); err != nil {
		return nil, nil, nil, err
	}
	if w, err = activation(op, "weight", weight); err != nil {
		return nil, nil, nil, err
	}
	if err := sameShape(op, o, xs); err != nil {
		return nil, nil, nil, err
	}
	if len(w.f32) != xs.cols() {
		return nil, nil, nil, fmt.Errorf("cpu %s: weight of %d for rows of %d", op, len(w.f32), xs.cols())
	}
	return o, xs, w, nil
}

// HeadNorm normalizes every head vector of x in place.
func (b *Backend) HeadNorm(x, weight backend.Tensor, eps float32) error {
	xs, err := activation("head norm", "x", x)
	if err != nil {
		return err
	}
	w, err := activation("head norm", "weight", weight)
	if err != nil {
		return err
	}
	hd := len(w.f32)
	if hd == 0 || xs.cols()%hd != 0 {
		return fmt.Errorf("cpu head norm: rows of %d are not whole heads of %d", xs.cols(), hd)
	}
	return cpu.RMSNorm(b.pool, xs.f32, xs.f32, w.f32, xs.rows()*xs.cols()/hd, eps)
}

// AddBias adds bias to every row of x.
func (b *Backend) AddBias(x, bias backend.Tensor) error {
	xs, err := activation("add bias", "x", x)
	if err != nil {
		return err
	}
	bs, err := activation("add bias", "bias", bias)
	if err != nil {
		return err
	}
	n := len(bs.f32)
	if n != xs.cols() {
		return fmt.Errorf("cpu add bias: bias of %d for rows of %d", n, xs.cols())
	}
	for off := 0; off < len(xs.f32); off += n {
		row := xs.f32[off : off+n]
		for i, v := range bs.f32 {
			row[i] += v
		}
	}
	return nil
}

// RopeKVWrite rotates q and k by their tokens' positions and writes k and v into the
// cache at their slots.
func (b *Backend) RopeKVWrite(q, k, v backend.Tensor, rope backend.Rope, kv backend.KVCache, layer int, st backend.Step) error {
	const op = "rope kv"
	qs, err := activation(op, "q", q)
	if err != nil {
		return err
	}
	ks, err := activation(op, "k", k)
	if err != nil {
		return err
	}
	vs, err := activation(op, "v", v)
	if err != nil {
		return err
	}
	_, l, err := cache(op, kv, layer)
	if err != nil {
		return err
	}
	s, err := stepOf(op, st)
	if err != nil {
		return err
	}
	n, hd := s.meta.NumTokens(), l.HeadDim
	if qs.rows() != n || ks.rows() != n || vs.rows() != n || qs.cols()%hd != 0 ||
		ks.cols() != l.KVHeads*hd || vs.cols() != ks.cols() {
		return fmt.Errorf("cpu rope kv: q %v, k %v, v %v for %d tokens and %d kv heads of %d", qs.shape, ks.shape, vs.shape, n, l.KVHeads, hd)
	}
	if l.ValuesAreKeys && ks != vs {
		return fmt.Errorf("cpu rope kv: layer %d's cache holds its values as its keys: v must be k", layer)
	}
	if err := s.ropeTables(rope); err != nil {
		return err
	}
	style := cpu.RopeInterleaved
	if rope.NeoX {
		style = cpu.RopeNeoX
	}
	if err := cpu.Rope(b.pool, qs.f32, n, qs.cols()/hd, hd, rope.Dim, s.rows, s.cos, s.sin, style); err != nil {
		return err
	}
	if err := cpu.Rope(b.pool, ks.f32, n, l.KVHeads, hd, rope.Dim, s.rows, s.cos, s.sin, style); err != nil {
		return err
	}
	return cpu.WriteKV(l, ks.f32, vs.f32, s.meta.SlotMapping)
}

// ropeTables computes cos and sin of the step's positions for rope, unless it has them.
// An angle is formed in float32 (position times inverse frequency), as llama2.c and
// llama.cpp do.
func (s *step) ropeTables(rope backend.Rope) error {
	inv, err := activation("rope kv", "inverse frequencies", rope.InvFreq)
	if err != nil {
		return err
	}
	if s.rope == rope {
		return nil
	}
	half := len(inv.f32)
	if rope.Dim != 2*half {
		return fmt.Errorf("cpu rope kv: %d inverse frequencies for %d rotated dimensions", half, rope.Dim)
	}
	n := s.meta.NumTokens()
	s.cos, s.sin, s.rows = grow(s.cos, n*half), grow(s.sin, n*half), s.rows[:0]
	for t, pos := range s.meta.Positions {
		cos, sin := s.cos[t*half:(t+1)*half], s.sin[t*half:(t+1)*half]
		for i, f := range inv.f32 {
			sn, cs := math.Sincos(float64(float32(pos) * f))
			cos[i], sin[i] = float32(cs)*rope.MScale, float32(sn)*rope.MScale
		}
		s.rows = append(s.rows, int32(t))
	}
	s.rope = rope
	return nil
}

// grow returns buf resliced to n values, reallocated when too small.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// contextIndices returns each token's index in its sequence's context (UploadStep checked
// the layout), computed by the step's first Attention: every layer shares them. The i-th
// of a sequence's q tokens, with a context of c, is at c-q+i; a token's position (RoPE's)
// plays no part.
func (s *step) contextIndices() []int32 {
	m := s.meta
	if s.ctx != nil {
		return s.ctx
	}
	ctx := s.ctxBuf[:0]
	for i := range m.NumSeqs() {
		q := m.QueryStarts[i+1] - m.QueryStarts[i]
		for t := range q {
			ctx = append(ctx, m.ContextLens[i]-q+t)
		}
	}
	s.ctx, s.ctxBuf = ctx, ctx
	return ctx
}

// Attention runs paged causal attention for all sequences of the step in one parallel loop.
func (b *Backend) Attention(out, q backend.Tensor, kv backend.KVCache, layer int, scale float32, st backend.Step) error {
	return b.AttentionWith(out, q, kv, layer, backend.AttentionOptions{Scale: scale}, st)
}

// AttentionWith runs attention with a sliding window and soft-capped scores as opt asks
// (cpu.AttentionBatchWith).
func (b *Backend) AttentionWith(out, q backend.Tensor, kv backend.KVCache, layer int, opt backend.AttentionOptions, st backend.Step) error {
	o, err := activation("attention", "out", out)
	if err != nil {
		return err
	}
	qs, err := activation("attention", "q", q)
	if err != nil {
		return err
	}
	_, l, err := cache("attention", kv, layer)
	if err != nil {
		return err
	}
	s, err := stepOf("attention", st)
	if err != nil {
		return err
	}
	m := s.meta
	qDim := qs.cols()
	if err := sameShape("attention", o, qs); err != nil {
		return err
	}
	if qs.rows() != m.NumTokens() || qDim%l.HeadDim != 0 {
		return fmt.Errorf("cpu attention: q %v for %d tokens of heads of %d", qs.shape, m.NumTokens(), l.HeadDim)
	}
	ctx := s.contextIndices()
	seqs := b.attnSeqs[:0]
	for i := range m.NumSeqs() {
		t0, t1 := int(m.QueryStarts[i]), int(m.QueryStarts[i+1])
		seqs = append(seqs, cpu.AttentionSeq{Out: o.f32[t0*qDim : t1*qDim], Q: qs.f32[t0*qDim : t1*qDim],
			NTokens: t1 - t0, BlockTable: m.BlockTables[i*m.MaxBlocks : (i+1)*m.MaxBlocks],
			ContextIndex: ctx[t0:t1]})
	}
	b.attnSeqs = seqs
	return cpu.AttentionBatchWith(b.pool, seqs, qDim/l.HeadDim, l, cpu.AttnOptions{Scale: opt.Scale, Window: opt.Window, Softcap: opt.Softcap})
}

// SwiGLU computes out = silu(gate) * up.
func (b *Backend) SwiGLU(out, gate, up backend.Tensor) error {
	o, err := activation("swiglu", "out", out)
	if err != nil {
		return err
	}
	g, err := activation("swiglu", "gate", gate)
	if err != nil {
		return err
	}
	u, err := activation("swiglu", "up", up)
	if err != nil {
		return err
	}
	return cpu.SwiGLU(b.pool, o.f32, g.f32, u.f32)
}

// GatherRows copies the rows named by the step's logits indices.
func (b *Backend) GatherRows(out, in backend.Tensor, st backend.Step) error {
	o, err := activation("gather", "out", out)
	if err != nil {
		return err
	}
	x, err := activation("gather", "in", in)
	if err != nil {
		return err
	}
	s, err := stepOf("gather", st)
	if err != nil {
		return err
	}
	idx, dim := s.meta.LogitsIndices, x.cols()
	if o.rows() != len(idx) || o.cols() != dim {
		return fmt.Errorf("cpu gather: out %v for %d rows of %d", o.shape, len(idx), dim)
	}
	for j, r := range idx {
		if r < 0 || int(r) >= x.rows() {
			return fmt.Errorf("cpu gather: row %d outside %d", r, x.rows())
		}
		copy(o.f32[j*dim:(j+1)*dim], x.f32[int(r)*dim:])
	}
	return nil
}

// Logits multiplies x by wᵀ straight into dst.
func (b *Backend) Logits(dst []float32, x, w backend.Tensor) error {
	xs, err := activation("logits", "x", x)
	if err != nil {
		return err
	}
	wm, err := matrix("logits", "w", w)
	if err != nil {
		return err
	}
	if xs.cols() != wm.Cols || len(dst) != xs.rows()*wm.Rows {
		return fmt.Errorf("cpu logits: %d values for x %v · w [%d %d]ᵀ", len(dst), xs.shape, wm.Rows, wm.Cols)
	}
	return matMul(b.pool, dst, wm, xs.f32, xs.rows())
}

// AttentionMass adds the attention probabilities of the sequences that ask to their mass
// (see backend.AttentionMasser).
func (b *Backend) AttentionMass(mass [][]float32, from []int, q backend.Tensor, kv backend.KVCache, layer int, scale float32, st backend.Step) error {
	qs, err := activation("attention mass", "q", q)
	if err != nil {
		return err
	}
	_, l, err := cache("attention mass", kv, layer)
	if err != nil {
		return err
	}
	s, err := stepOf("attention mass", st)
	if err != nil {
		return err
	}
	m := s.meta
	if len(mass) != m.NumSeqs() || len(from) != m.NumSeqs() {
		return fmt.Errorf("cpu attention mass: %d masses and %d offsets for %d sequences", len(mass), len(from), m.NumSeqs())
	}
	qDim := qs.cols()
	ctx := s.contextIndices()
	for i, ms := range mass {
		if ms == nil {
			continue
		}
		t0, t1 := int(m.QueryStarts[i])+from[i], int(m.QueryStarts[i+1])
		if from[i] < 0 || t0 > t1 {
			return fmt.Errorf("cpu attention mass: sequence %d: rows from %d of %d", i, from[i], t1-int(m.QueryStarts[i]))
		}
		table := m.BlockTables[i*m.MaxBlocks : (i+1)*m.MaxBlocks]
		if err := cpu.AttentionMass(b.pool, ms, qs.f32[t0*qDim:t1*qDim], t1-t0, qDim/l.HeadDim, l, table, ctx[t0:t1], scale); err != nil {
			return fmt.Errorf("sequence %d: %w", i, err)
		}
	}
	return nil
}

// GeGLU computes out = gelu_tanh(gate) * up.
func (b *Backend) GeGLU(out, gate, up backend.Tensor) error {
	o, err := activation("geglu", "out", out)
	if err != nil {
		return err
	}
	g, err := activation("geglu", "gate", gate)
	if err != nil {
		return err
	}
	u, err := activation("geglu", "up", up)
	if err != nil {
		return err
	}
	return cpu.GeGLU(b.pool, o.f32, g.f32, u.f32)
}

// Scale multiplies x by s in place.
func (b *Backend) Scale(x backend.Tensor, s float32) error {
	t, err := activation("scale", "x", x)
	if err != nil {
		return err
	}
	cpu.Scale(b.pool, t.f32, s)
	return nil
}

// Add writes a + b to out.
func (b *Backend) Add(out, x, y backend.Tensor) error {
	o, err := activation("add", "out", out)
	if err != nil {
		return err
	}
	xs, err := activation("add", "a", x)
	if err != nil {
		return err
	}
	ys, err := activation("add", "b", y)
	if err != nil {
		return err
	}
	if err := sameShape("add", o, xs); err != nil {
		return err
	}
	if err := sameShape("add", o, ys); err != nil {
		return err
	}
	return cpu.Add(b.pool, o.f32, xs.f32, ys.f32)
}

// SumSquares writes each row's sum of squares of x into out ([rows][1]).
func (b *Backend) SumSquares(out, x backend.Tensor) error {
	o, err := activation("sum squares", "out", out)
	if err != nil {
		return err
	}
	xs, err := activation("sum squares", "x", x)
	if err != nil {
		return err
	}
	if o.rows() != xs.rows() || o.cols() != 1 {
		return fmt.Errorf("cpu sum squares: out %v for x %v", o.shape, xs.shape)
	}
	return cpu.SumSquares(b.pool, o.f32, xs.f32, xs.cols())
}

// RMSNormSplit normalizes x in place by the summed squares of its whole rows.
func (b *Backend) RMSNormSplit(x, sumSquares, weight backend.Tensor, n int, eps float32) error {
	xs, err := activation("rmsnorm split", "x", x)
	if err != nil {
		return err
	}
	ss, err := activation("rmsnorm split", "sum squares", sumSquares)
	if err != nil {
		return err
	}
	w, err := activation("rmsnorm split", "weight", weight)
	if err != nil {
		return err
	}
	if ss.rows() != xs.rows() || ss.cols() != 1 || len(w.f32) != xs.cols() {
		return fmt.Errorf("cpu rmsnorm split: x %v, sum squares %v, weight %v", xs.shape, ss.shape, w.shape)
	}
	return cpu.RMSNormSplit(b.pool, xs.f32, ss.f32, w.f32, n, eps)
}
