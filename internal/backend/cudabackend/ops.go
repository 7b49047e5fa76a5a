package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// Embedding gathers the step's token rows of table into out.
func (b *Backend) Embedding(out, table backend.Tensor, st backend.Step) error {
	o, err := devTensor("embedding", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	w, err := devTensor("embedding", "table", table, weightTypes...)
	if err != nil {
		return err
	}
	s, err := b.stepOf("embedding", st)
	if err != nil {
		return err
	}
	n := s.meta.NumTokens()
	if o.rows() != n || o.cols() != w.cols() {
		return fmt.Errorf("cuda embedding: out %v for %d tokens of %d values", o.shape, n, w.cols())
	}
	return b.ops.Embedding(o.buf, w.buf, s.tokens, n, w.rows(), w.cols())
}

// normOperands checks out and x of one shape and weight as long as a row.
func normOperands(op string, out, x, weight backend.Tensor) (o, xs, w *tensor, err error) {
	if o, err = devTensor(op, "out", out, cuda.F32); err != nil {
		return nil, nil, nil, err
	}
	if xs, err = devTensor(op, "x", x, cuda.F32); err != nil {
		return nil, nil, nil, err
	}
	if w, err = devTensor(op, "weight", weight, cuda.F32); err != nil {
		return nil, nil, nil, err
	}
	if err := sameShape(op, o, xs); err != nil {
		return nil, nil, nil, err
	}
	if w.buf.Len != xs.cols() {
		return nil, nil, nil, fmt.Errorf("cuda %s: weight of %d for rows of %d", op, w.buf.Len, xs.cols())
	}
	return o, xs, w, nil
}

// RMSNorm normalizes the rows of x into out.
func (b *Backend) RMSNorm(out, x, weight backend.Tensor, eps float32) error {
	o, xs, w, err := normOperands("rmsnorm", out, x, weight)
	if err != nil {
		return err
	}
	return b.rmsNorm(o.buf, xs.buf, cuda.Buffer{}, w.buf, xs.rows(), xs.cols(), eps)
}

// RMSNormResidual adds x into residual and normalizes the sums into out.
func (b *Backend) RMSNormResidual(out, residual, x, weight backend.Tensor, eps float32) error {
	o, r, w, err := normOperands("rmsnorm residual", out, residual, weight)
	if err != nil {
		return err
	}
	xs, err := devTensor("rmsnorm residual", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	if err := sameShape("rmsnorm residual", r, xs); err != nil {
		return err
	}
	return b.rmsNorm(o.buf, r.buf, xs.buf, w.buf, r.rows(), r.cols(), eps)
}

// rmsNorm runs the RMSNorm kernel that also writes what the next matrix product reads
// instead of its float32 output, when one does: the 16-bit shadow for a cuBLAS GEMM, or the
// int8 rounding for a quantized GEMV (x zero: no residual add).
func (b *Backend) rmsNorm(out, residual, x, weight cuda.Buffer, rows, cols int, eps float32) error {
	if sh, ok := b.shadowTarget(rows, cols, b.castType); ok {
		if err := b.ops.RMSNormShadow(out, sh, residual, x, weight, rows, cols, eps); err != nil {
			return err
		}
		b.setShadow(out.Ptr, sh.Len, sh.DType)
		return nil
	}
	if out.DType == cuda.F32 && b.x8Target(rows, cols) {
		return b.ops.RMSNormX8(out, residual, x, weight, rows, cols, eps)
	}
	return b.ops.RMSNorm(out, residual, x, weight, rows, cols, eps)
}

// HeadNorm normalizes every head vector of x in place (the RMSNorm kernel over rows of one
// head).
func (b *Backend) HeadNorm(x, weight backend.Tensor, eps float32) error {
	xs, err := devTensor("head norm", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	w, err := devTensor("head norm", "weight", weight, cuda.F32)
	if err != nil {
		return err
	}
	hd := w.buf.Len
	if hd == 0 || xs.cols()%hd != 0 {
		return fmt.Errorf("cuda head norm: rows of %d are not whole heads of %d", xs.cols(), hd)
	}
	return b.ops.RMSNorm(xs.buf, xs.buf, cuda.Buffer{}, w.buf, xs.rows()*xs.cols()/hd, hd, eps)
}

// MatMul computes out = x · wᵀ.
func (b *Backend) MatMul(out, x, w backend.Tensor) error {
	o, err := devTensor("matmul", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor("matmul", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	wm, err := devWeight("matmul", "w", w)
	if err != nil {
		return err
	}
	if len(wm.shape) != 2 || xs.cols() != wm.cols() || o.cols() != wm.rows() || o.rows() != xs.rows() {
		return fmt.Errorf("cuda matmul: out %v = x %v · w %vᵀ", o.shape, xs.shape, wm.shape)
	}
	return b.matMul(o.buf, xs.buf, wm, xs.rows())
}

// matMul computes y = x · wᵀ for n rows of float32 x into float32 y (inside Run): a 2:4
// weight compressed at upload through cuSPARSELt (matMulSparse), cuBLAS directly for F32 weights, the GEMV kernel for up to cuda.GEMVMaxRows rows of a 16-bit or
// quantized weight (for a quantized one in the backend's quantGEMV layout), else x cast to BF16 or the weight's type and cuBLAS (a quantized
// weight dequantized chunk by chunk for it).
func (b *Backend) matMul(y, x cuda.Buffer, w *tensor, n int) error {
	m, k := w.rows(), w.cols()
	if w.sparse != nil {
		return b.matMulSparse(y, x, w, n)
	}
	if w.buf.DType == cuda.F32 {
		return b.ops.MatMulT(y, x, w.buf, n, k, m)
	}
	if w.buf.DType == cuda.FP8 {
		return b.matMulFP8(y, x, w, n)
	}
	if cuda.Quantized(w.buf.DType) {
		if n <= cuda.GEMVMaxRows {
			return b.ops.GEMVQWith(b.quantGEMV, y, x, w.buf, n, k, m)
		}
		return b.matMulDequantized(y, x, w, n)
	}
	if n <= cuda.GEMVMaxRows && k%8 == 0 {
		return b.ops.GEMV(y, x, w.buf, n, k, m)
	}
	xc, err := b.castInput(x, n*k, w.buf.DType)
	if err != nil {
		return err
	}
	return b.ops.MatMulT(y, xc, w.buf, n, k, m)
}

// matMulDequantized computes y = x · wᵀ for a quantized w through cuBLAS: x cast to BF16
// once, then w's rows a chunk at a time (as many as the dequantization scratch holds,
// reserved when the weights were uploaded) dequantized to BF16 and multiplied into their
// columns of y (inside Run).
func (b *Backend) matMulDequantized(y, x cuda.Buffer, w *tensor, n int) error {
	m, k := w.rows(), w.cols()
	chunk := b.dequant.Len / k
	if chunk == 0 {
		return fmt.Errorf("cuda matmul: no dequantization scratch for rows of %d %s values", k, w.buf.DType)
	}
	xc, err := b.castInput(x, n*k, cuda.BF16)
	if err != nil {
		return err
	}
	for r0 := 0; r0 < m; r0 += chunk {
		r1 := min(m, r0+chunk)
		part, err := w.buf.Slice(r0*k, r1*k)
		if err != nil {
			return err
		}
		wd := cuda.Buffer{Ptr: b.dequant.Ptr, DType: cuda.BF16, Len: (r1 - r0) * k}
		yc := cuda.Buffer{Ptr: y.Ptr + uint64(4*r0), DType: cuda.F32, Len: y.Len - r0}
		if err := firstErr(b.ops.DequantizeBF16(wd, part, r1-r0, k), b.ops.MatMulTStrided(yc, xc, wd, n, k, r1-r0, m)); err != nil {
			return err
		}
	}
	return nil
}

// castInput casts the first count float32 values of x to dt in the backend's scratch
// buffer (grown first when too small; growing fails inside a graph capture) and returns
// the cast values, for cuBLAS (inside Run).
func (b *Backend) castInput(x cuda.Buffer, count int, dt cuda.DType) (cuda.Buffer, error) {
	b.castType = dt
	if xc, ok := b.shadowOf(x, count, dt); ok {
		return xc, nil
	}
	if err := b.ensureScratch(count); err != nil {
		return cuda.Buffer{}, err
	}
	xc := cuda.Buffer{Ptr: b.scratch.Ptr, DType: dt, Len: count}
	if err := b.ops.Cast(xc, cuda.Buffer{Ptr: x.Ptr, DType: cuda.F32, Len: count}); err != nil {
		return cuda.Buffer{}, err
	}
	return xc, nil
}

// AddBias adds bias to every row of x.
func (b *Backend) AddBias(x, bias backend.Tensor) error {
	xs, err := devTensor("add bias", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	bs, err := devTensor("add bias", "bias", bias, cuda.F32)
	if err != nil {
		return err
	}
	if bs.buf.Len != xs.cols() {
		return fmt.Errorf("cuda add bias: bias of %d for rows of %d", bs.buf.Len, xs.cols())
	}
	return b.ops.AddBias(xs.buf, bs.buf, xs.rows(), xs.cols())
}

// RopeKVWrite rotates q and k by their tokens' positions and writes k and v into layer's
// cache at their slots (one fused kernel).
func (b *Backend) RopeKVWrite(q, k, v backend.Tensor, rope backend.Rope, kv backend.KVCache, layer int, st backend.Step) error {
	const op = "rope kv"
	qs, err := devTensor(op, "q", q, cuda.F32)
	if err != nil {
		return err
	}
	ks, err := devTensor(op, "k", k, cuda.F32)
	if err != nil {
		return err
	}
	vs, err := devTensor(op, "v", v, cuda.F32)
	if err != nil {
		return err
	}
	inv, err := devTensor(op, "inverse frequencies", rope.InvFreq, cuda.F32)
	if err != nil {
		return err
	}
	_, l, err := kvOf(op, kv, layer)
	if err != nil {
		return err
	}
	s, err := b.stepOf(op, st)
	if err != nil {
		return err
	}
	n, hd := s.meta.NumTokens(), l.HeadDim
	if qs.rows() != n || ks.rows() != n || vs.rows() != n || qs.cols()%hd != 0 ||
		ks.cols() != l.KVHeads*hd || vs.cols() != ks.cols() {
		return fmt.Errorf("cuda rope kv: q %v, k %v, v %v for %d tokens and %d kv heads of %d", qs.shape, ks.shape, vs.shape, n, l.KVHeads, hd)
	}
	if l.ValuesAreKeys && ks != vs {
		return fmt.Errorf("cuda rope kv: layer %d's cache holds its values as its keys: v must be k", layer)
	}
	if inv.buf.Len*2 != rope.Dim {
		return fmt.Errorf("cuda rope kv: %d inverse frequencies for %d rotated dimensions", inv.buf.Len, rope.Dim)
	}
	return b.ops.RopeKV(cuda.RopeKVArgs{Q: qs.buf, K: ks.buf, V: vs.buf, QStride: qs.cols(), KStride: ks.cols(), VStride: vs.cols(),
		Tokens: n, Heads: qs.cols() / hd, Positions: s.positions, Slots: s.slots,
		Rope: cuda.Rope{InvFreq: inv.buf, Dim: rope.Dim, NeoX: rope.NeoX, MScale: rope.MScale}, Cache: l})
}

// attentionOperands checks an attention's operands: out and q of one shape, a row of q per
// token of the step, whole heads of the cache layer's head size.
func (b *Backend) attentionOperands(out, q backend.Tensor, kv backend.KVCache, layer int, st backend.Step) (o, qs *tensor, l *cuda.KVCacheLayer, s *step, err error) {
	if o, err = devTensor("attention", "out", out, cuda.F32); err != nil {
		return
	}
	if qs, err = devTensor("attention", "q", q, cuda.F32); err != nil {
		return
	}
	if _, l, err = kvOf("attention", kv, layer); err != nil {
		return
	}
	if s, err = b.stepOf("attention", st); err != nil {
		return
	}
	if err = sameShape("attention", o, qs); err != nil {
		return
	}
	if qs.rows() != s.meta.NumTokens() || qs.cols()%l.HeadDim != 0 {
		err = fmt.Errorf("cuda attention: q %v for %d tokens of heads of %d", qs.shape, s.meta.NumTokens(), l.HeadDim)
	}
	return
}

// Attention runs paged causal attention: split-K decode when every sequence has one query
// token, its few-query twin (cuda.Ops.AttentionVerify) when each has at most
// verifyMaxQuery (speculative verification), the varlen prefill kernel otherwise.
func (b *Backend) Attention(out, q backend.Tensor, kv backend.KVCache, layer int, scale float32, st backend.Step) error {
	o, qs, l, s, err := b.attentionOperands(out, q, kv, layer, st)
	if err != nil {
		return err
	}
	if l.Quantized() {
		return b.attentionQuantized(o, qs, l, s, backend.AttentionOptions{Scale: scale})
	}
	m, qDim := s.meta, qs.cols()
	heads, seqs, tokens := qDim/l.HeadDim, m.NumSeqs(), m.NumTokens()
	if l.HeadDim%32 != 0 {
		return b.attentionSmall(o, qs, l, s, heads, scale)
	}
	maxQ := m.MaxQueryLen
	for i := range seqs {
		maxQ = max(maxQ, int(m.QueryStarts[i+1]-m.QueryStarts[i]))
	}
	maxCtx := m.MaxContextLen
	for _, c := range m.ContextLens {
		maxCtx = max(maxCtx, int(c))
	}
	if s.graphable {
		// Split-K sizing from the stride bound, fixed for the steps that share a graph.
		maxCtx = s.maxBlocks * l.BlockSize
	}
	if l.HeadDim > cuda.MaxHeadDim {
		return b.attentionMLA(o, qs, l, s, heads, maxQ, maxCtx, scale)
	}
	switch {
	case tokens == seqs:
		if err := b.ensureWork(seqs, heads, l.HeadDim); err != nil {
			return err
		}
		return b.ops.AttentionDecode(cuda.DecodeArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Seqs: seqs, Heads: heads,
			Cache: l, BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, ContextLens: s.contextLens,
			MaxContext: maxCtx, Scale: scale, Work: b.work})
	case maxQ <= verifyMaxQuery && cuda.VerifyKernel(l.K.DType, heads, l.KVHeads, l.HeadDim):
		if err := b.ensureWork(max(tokens, seqs*maxQ), heads, l.HeadDim); err != nil {
			return err
		}
		return b.ops.AttentionVerify(cuda.VerifyArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Tokens: tokens,
			Seqs: seqs, Heads: heads, Cache: l, SeqStarts: s.queryStarts, ContextLens: s.contextLens, MaxQueryLen: maxQ,
			BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, MaxContext: maxCtx, Scale: scale, Work: b.work})
	}
	return b.ops.AttentionPrefill(cuda.PrefillArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Tokens: tokens,
		Seqs: seqs, Heads: heads, Cache: l, SeqStarts: s.queryStarts, ContextLens: s.contextLens, MaxQueryLen: maxQ,
		BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, Scale: scale})
}

// attentionMLA runs cuda.Ops.AttentionMLA for a step over a cache whose values are its
// keys, of heads wider than the other kernels take (multi-head latent attention's 576),
// whatever its query lengths: one kernel for prefill, decode and verification. The
// split-K workspace is made to hold the step's rows when the split choice wants one.
func (b *Backend) attentionMLA(o, qs *tensor, l *cuda.KVCacheLayer, s *step, heads, maxQ, maxCtx int, scale float32) error {
	m, qDim := s.meta, qs.cols()
	a := cuda.MLAArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Tokens: m.NumTokens(), Seqs: m.NumSeqs(),
		Heads: heads, Cache: l, SeqStarts: s.queryStarts, ContextLens: s.contextLens, MaxQueryLen: maxQ, MaxContext: maxCtx,
		BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, Scale: scale}
	if splits, _ := cuda.MLASplits(a, b.dev.Info().Multiprocessors, decodeSplits); splits > 1 {
		if err := b.ensureWork(a.Tokens, heads, l.HeadDim); err != nil {
			return err
		}
		a.Work = b.work
	}
	return b.ops.AttentionMLA(a)
}

// verifyMaxQuery is the most query tokens per sequence of a step whose attention runs
// the few-query decode kernel (a speculative verification of 1+16) rather than the
// prefill kernel.
const verifyMaxQuery = 17

// ensureWork makes the split-K workspace of decode attention hold rows query rows (a
// sequence's worth of partial results each) of heads heads of headDim (inside Run). Past
// maxGraphSeqs rows it holds fewer splits a row, so that it never outgrows what 256 rows
// of decodeSplits take (the attention launches then split less: with that many rows the
// blocks fill the device anyway). Growing it synchronizes first, which fails during a
// graph capture before anything is freed.
func (b *Backend) ensureWork(rows, heads, headDim int) error {
	if b.work != nil && b.work.Seqs >= rows && b.work.Heads >= heads && b.work.HeadDim >= headDim {
		return nil
	}
	seqs := max(rows, 64)
	if b.work != nil {
		if err := b.dev.Sync(); err != nil {
			return err
		}
		w := b.work
		b.work = nil
		if err := firstErr(b.dropGraphs(), b.dev.FreeDecodeWorkspace(w)); err != nil {
			return err
		}
		if rows > w.Seqs {
			seqs = max(seqs, 2*w.Seqs) // a few regrowths (each drops the graphs), not one a row
		}
		heads, headDim = max(heads, w.Heads), max(headDim, w.HeadDim)
	}
	splits := decodeSplits
	if seqs > maxGraphSeqs {
		splits = max(1, maxGraphSeqs*decodeSplits/seqs)
	}
	w, err := b.dev.NewDecodeWorkspace(seqs, heads, splits, headDim)
	if err != nil {
		return fmt.Errorf("cuda attention: %w", err)
	}
	b.work = w
	return nil
}

// smallMaxContext bounds the context of the plain attention kernel (its scores sit in
// shared memory).
const smallMaxContext = 12000

// attentionSmall runs the plain attention kernel, for head sizes that are not a multiple
// of 32 (tiny models such as stories260K).
func (b *Backend) attentionSmall(o, q *tensor, l *cuda.KVCacheLayer, s *step, heads int, scale float32) error {
	m := s.meta
	maxCtx := 1
	for _, c := range m.ContextLens {
		maxCtx = max(maxCtx, int(c))
	}
	if maxCtx > smallMaxContext || l.HeadDim > cuda.MaxHeadDim || heads%l.KVHeads != 0 {
		return fmt.Errorf("cuda attention: head dim %d with context %d and %d/%d heads: unsupported", l.HeadDim, maxCtx, heads, l.KVHeads)
	}
	shared := maxCtx
	if b.capturing {
		// A replayed graph keeps this launch's shared memory: size it for the longest
		// context the step's block-table stride allows.
		bound := s.maxBlocks * l.BlockSize
		if bound > smallMaxContext {
			return fmt.Errorf("cuda attention: head dim %d with a context bound of %d: not captured", l.HeadDim, bound)
		}
		shared = bound
	}
	return b.ops.AttentionSmall(cuda.PrefillArgs{Out: o.buf, Q: q.buf, Tokens: m.NumTokens(), Seqs: m.NumSeqs(), Heads: heads,
		Cache: l, SeqStarts: s.queryStarts, ContextLens: s.contextLens, BlockTables: s.blockTables, MaxBlocks: s.maxBlocks,
		Scale: scale}, shared)
}

// SwiGLU computes out = silu(gate) * up.
func (b *Backend) SwiGLU(out, gate, up backend.Tensor) error {
	o, err := devTensor("swiglu", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	g, err := devTensor("swiglu", "gate", gate, cuda.F32)
	if err != nil {
		return err
	}
	u, err := devTensor("swiglu", "up", up, cuda.F32)
	if err != nil {
		return err
	}
	if err := firstErr(sameShape("swiglu", o, g), sameShape("swiglu", o, u)); err != nil {
		return err
	}
	return b.ops.SwiGLU(o.buf, g.buf, u.buf, o.rows(), o.cols(), o.cols())
}

// GatherRows copies the rows named by the step's logits indices.
func (b *Backend) GatherRows(out, in backend.Tensor, st backend.Step) error {
	o, err := devTensor("gather", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	x, err := devTensor("gather", "in", in, cuda.F32)
	if err != nil {
		return err
	}
	s, err := b.stepOf("gather", st)
	if err != nil {
		return err
	}
	idx, dim := s.meta.LogitsIndices, x.cols()
	if o.rows() != len(idx) || o.cols() != dim {
		return fmt.Errorf("cuda gather: out %v for %d rows of %d", o.shape, len(idx), dim)
	}
	for _, r := range idx {
		if r < 0 || int(r) >= x.rows() {
			return fmt.Errorf("cuda gather: row %d outside %d", r, x.rows())
		}
	}
	return b.ops.GatherRows(o.buf, x.buf, s.logitsIndices, len(idx), dim)
}

// Logits multiplies x by wᵀ on the device and copies the result into dst: the step's one
// host synchronisation.
func (b *Backend) Logits(dst []float32, x, w backend.Tensor) error {
	xs, err := devTensor("logits", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	wm, err := devWeight("logits", "w", w)
	if err != nil {
		return err
	}
	n := xs.rows()
	if len(wm.shape) != 2 || xs.cols() != wm.cols() || len(dst) != n*wm.rows() {
		return fmt.Errorf("cuda logits: %d values for x %v · w %vᵀ", len(dst), xs.shape, wm.shape)
	}
	if b.logitsDev.Len < len(dst) {
		if err := b.dev.Sync(); err != nil {
			return err
		}
		if err := b.free(b.logitsDev); err != nil {
			return err
		}
		b.logitsDev = cuda.Buffer{}
		l, err := b.alloc(cuda.F32, len(dst))
		if err != nil {
			return fmt.Errorf("cuda logits: %w", err)
		}
		b.logitsDev = l
	}
	y := cuda.Buffer{Ptr: b.logitsDev.Ptr, DType: cuda.F32, Len: len(dst)}
	if err := b.matMul(y, xs.buf, wm, n); err != nil {
		return err
	}
	return cuda.Download(b.dev, dst, y)
}

// Compile-time check that Backend implements the op set.
var _ backend.Backend = (*Backend)(nil)
