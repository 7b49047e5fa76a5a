package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// AttentionWith runs attention as Attention does when opt asks for nothing more than a
// scale, and the windowed, soft-capped prefill kernel (cuda.Ops.AttentionWindow) for
// every step otherwise.
func (b *Backend) AttentionWith(out, q backend.Tensor, kv backend.KVCache, layer int, opt backend.AttentionOptions, st backend.Step) error {
	if opt.Window <= 0 && opt.Softcap <= 0 {
		return b.Attention(out, q, kv, layer, opt.Scale, st)
	}
	o, qs, l, s, err := b.attentionOperands(out, q, kv, layer, st)
	if err != nil {
		return err
	}
	if l.Quantized() {
		return b.attentionQuantized(o, qs, l, s, opt)
	}
	m, qDim := s.meta, qs.cols()
	if opt.Softcap <= 0 {
		// A window no context reaches is plain attention, on the fast kernels. The bound
		// of a graphed step is its block-table stride, fixed for the steps that replay it.
		bound := m.MaxContextLen
		for _, c := range m.ContextLens {
			bound = max(bound, int(c))
		}
		if s.graphable {
			bound = s.maxBlocks * l.BlockSize
		}
		if bound <= opt.Window {
			return b.Attention(out, q, kv, layer, opt.Scale, st)
		}
	}
	maxQ := m.MaxQueryLen
	for i := range m.NumSeqs() {
		maxQ = max(maxQ, int(m.QueryStarts[i+1]-m.QueryStarts[i]))
	}
	return b.ops.AttentionWindow(cuda.PrefillArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Tokens: m.NumTokens(),
		Seqs: m.NumSeqs(), Heads: qDim / l.HeadDim, Cache: l, SeqStarts: s.queryStarts, ContextLens: s.contextLens,
		MaxQueryLen: maxQ, BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, Scale: opt.Scale}, opt.Window, opt.Softcap)
}

// GeGLU computes out = gelu_tanh(gate) * up.
func (b *Backend) GeGLU(out, gate, up backend.Tensor) error {
	o, err := devTensor("geglu", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	g, err := devTensor("geglu", "gate", gate, cuda.F32)
	if err != nil {
		return err
	}
	u, err := devTensor("geglu", "up", up, cuda.F32)
	if err != nil {
		return err
	}
	if err := firstErr(sameShape("geglu", o, g), sameShape("geglu", o, u)); err != nil {
		return err
	}
	return b.ops.GeGLU(o.buf, g.buf, u.buf, o.rows()*o.cols())
}

// Scale multiplies x by s in place.
func (b *Backend) Scale(x backend.Tensor, s float32) error {
	t, err := devTensor("scale", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	return b.ops.Scale(t.buf, s, t.rows()*t.cols())
}

// Add writes a + b to out.
func (b *Backend) Add(out, x, y backend.Tensor) error {
	o, err := devTensor("add", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor("add", "a", x, cuda.F32)
	if err != nil {
		return err
	}
	ys, err := devTensor("add", "b", y, cuda.F32)
	if err != nil {
		return err
	}
	if err := firstErr(sameShape("add", o, xs), sameShape("add", o, ys)); err != nil {
		return err
	}
	return b.ops.Add(o.buf, xs.buf, ys.buf)
}

// SumSquares writes each row's sum of squares of x into out ([rows][1]).
func (b *Backend) SumSquares(out, x backend.Tensor) error {
	o, err := devTensor("sum squares", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor("sum squares", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	if o.rows() != xs.rows() || o.cols() != 1 {
		return fmt.Errorf("cuda sum squares: out %v for x %v", o.shape, xs.shape)
	}
	return b.ops.SumSquares(o.buf, xs.buf, xs.rows(), xs.cols())
}

// RMSNormSplit normalizes x in place by the summed squares of its whole rows.
func (b *Backend) RMSNormSplit(x, sumSquares, weight backend.Tensor, n int, eps float32) error {
	xs, err := devTensor("rmsnorm split", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	ss, err := devTensor("rmsnorm split", "sum squares", sumSquares, cuda.F32)
	if err != nil {
		return err
	}
	w, err := devTensor("rmsnorm split", "weight", weight, cuda.F32)
	if err != nil {
		return err
	}
	if ss.rows() != xs.rows() || ss.cols() != 1 || w.buf.Len != xs.cols() {
		return fmt.Errorf("cuda rmsnorm split: x %v, sum squares %v, weight %v", xs.shape, ss.shape, w.shape)
	}
	return b.ops.RMSNormSplit(xs.buf, ss.buf, w.buf, xs.rows(), xs.cols(), n, eps)
}
