package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

var _ backend.EncoderOps = (*Backend)(nil)

// EncoderEmbedding gathers the token rows into out, then adds the position rows and the
// segment rows (through the embedding kernel into a scratch buffer and the add kernel).
func (b *Backend) EncoderEmbedding(out, tokens, positions, types backend.Tensor, st backend.Step) error {
	const op = "encoder embedding"
	if err := b.Embedding(out, tokens, st); err != nil {
		return err
	}
	o, _ := devTensor(op, "out", out, cuda.F32)
	s, err := b.stepOf(op, st)
	if err != nil {
		return err
	}
	n, dim := s.meta.NumTokens(), o.cols()
	add := func(what string, table backend.Tensor, ids cuda.Buffer) error {
		if table == nil {
			return nil
		}
		w, err := devTensor(op, what, table, cuda.F32, cuda.F16, cuda.BF16)
		if err != nil {
			return err
		}
		if w.cols() != dim {
			return fmt.Errorf("cuda %s: %s table of %d columns for rows of %d", op, what, w.cols(), dim)
		}
		if err := b.grow(&b.encScratch, cuda.F32, n*dim, n*dim, op); err != nil {
			return err
		}
		tmp := cuda.Buffer{Ptr: b.encScratch.Ptr, DType: cuda.F32, Len: n * dim}
		if err := b.ops.Embedding(tmp, w.buf, ids, n, w.rows(), dim); err != nil {
			return err
		}
		return b.ops.Add(cuda.Buffer{Ptr: o.buf.Ptr, DType: cuda.F32, Len: n * dim}, o.buf, tmp)
	}
	if err := add("position", positions, s.positions); err != nil {
		return err
	}
	if types != nil && s.tokenTypes.Len != n {
		return fmt.Errorf("cuda %s: a token type table needs the step's token types (%d for %d tokens)", op, s.tokenTypes.Len, n)
	}
	return add("token type", types, s.tokenTypes)
}

// LayerNorm normalizes the rows of x + add into out, with weight and bias.
func (b *Backend) LayerNorm(out, x, add, weight, bias backend.Tensor, eps float32) error {
	o, xs, w, err := normOperands("layernorm", out, x, weight)
	if err != nil {
		return err
	}
	bs, err := devTensor("layernorm", "bias", bias, cuda.F32)
	if err != nil {
		return err
	}
	var ab cuda.Buffer
	if add != nil {
		a, err := devTensor("layernorm", "add", add, cuda.F32)
		if err != nil {
			return err
		}
		if err := sameShape("layernorm", a, xs); err != nil {
			return err
		}
		ab = a.buf
	}
	return b.ops.LayerNorm(o.buf, xs.buf, ab, w.buf, bs.buf, xs.rows(), xs.cols(), eps)
}

// GELU applies the erf form of GELU element-wise.
func (b *Backend) GELU(out, x backend.Tensor) error {
	o, err := devTensor("gelu", "out", out, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor("gelu", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	if err := sameShape("gelu", o, xs); err != nil {
		return err
	}
	n := xs.rows() * xs.cols()
	return b.ops.GELU(cuda.Buffer{Ptr: o.buf.Ptr, DType: cuda.F32, Len: n}, cuda.Buffer{Ptr: xs.buf.Ptr, DType: cuda.F32, Len: n})
}

// BidirectionalAttention attends every token over its whole sequence.
func (b *Backend) BidirectionalAttention(out, q, k, v backend.Tensor, heads int, scale, maxBias float32, st backend.Step) error {
	const op = "bidirectional attention"
	var ts [4]*tensor
	for i, t := range []backend.Tensor{out, q, k, v} {
		var err error
		if ts[i], err = devTensor(op, [...]string{"out", "q", "k", "v"}[i], t, cuda.F32); err != nil {
			return err
		}
		if err := sameShape(op, ts[i], ts[0]); err != nil {
			return err
		}
	}
	s, err := b.stepOf(op, st)
	if err != nil {
		return err
	}
	n := s.meta.NumTokens()
	if heads <= 0 || ts[0].cols()%heads != 0 || ts[0].rows() != n {
		return fmt.Errorf("cuda %s: %v for %d heads and %d tokens", op, ts[0].shape, heads, n)
	}
	return b.ops.BidirectionalAttention(ts[0].buf, ts[1].buf, ts[2].buf, ts[3].buf, s.queryStarts, n, s.meta.NumSeqs(),
		s.meta.MaxQueryLen, heads, ts[0].cols()/heads, scale, maxBias)
}

// GELUGLU computes GELU(gate) * up with the erf form of GELU.
func (b *Backend) GELUGLU(out, gate, up backend.Tensor) error {
	var ts [3]*tensor
	for i, t := range []backend.Tensor{out, gate, up} {
		var err error
		if ts[i], err = devTensor("gelu glu", [...]string{"out", "gate", "up"}[i], t, cuda.F32); err != nil {
			return err
		}
		if err := sameShape("gelu glu", ts[i], ts[0]); err != nil {
			return err
		}
	}
	n := ts[0].rows() * ts[0].cols()
	buf := func(t *tensor) cuda.Buffer { return cuda.Buffer{Ptr: t.buf.Ptr, DType: cuda.F32, Len: n} }
	return b.ops.GELUGLU(buf(ts[0]), buf(ts[1]), buf(ts[2]))
}

// PoolRows pools each sequence's rows of x on the device and reads them back into dst.
func (b *Backend) PoolRows(dst []float32, x backend.Tensor, mode backend.PoolMode, st backend.Step) error {
	xs, err := devTensor("pool rows", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	s, err := b.stepOf("pool rows", st)
	if err != nil {
		return err
	}
	seqs, dim := s.meta.NumSeqs(), xs.cols()
	if len(dst) != seqs*dim {
		return fmt.Errorf("cuda pool rows: %d values for %d sequences of %d", len(dst), seqs, dim)
	}
	if err := b.grow(&b.encPooled, cuda.F32, seqs*dim, seqs*dim, "pool rows"); err != nil {
		return err
	}
	y := cuda.Buffer{Ptr: b.encPooled.Ptr, DType: cuda.F32, Len: seqs * dim}
	m := map[backend.PoolMode]int{backend.PoolMean: 0, backend.PoolCLS: 1, backend.PoolLast: 2}[mode]
	if err := b.ops.PoolRows(y, xs.buf, s.queryStarts, seqs, dim, m); err != nil {
		return err
	}
	return cuda.Download(b.dev, dst, y)
}

var _ backend.RowReader = (*Backend)(nil)

// ReadRows copies x's rows back into dst after the queued ops.
func (b *Backend) ReadRows(dst []float32, x backend.Tensor) error {
	xs, err := devTensor("read rows", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	n := xs.rows() * xs.cols()
	if len(dst) != n {
		return fmt.Errorf("cuda read rows: %d values for %v", len(dst), xs.shape)
	}
	return cuda.Download(b.dev, dst, cuda.Buffer{Ptr: xs.buf.Ptr, DType: cuda.F32, Len: n})
}
