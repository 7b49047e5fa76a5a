package cpubackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

var _ backend.EncoderOps = (*Backend)(nil)

// EncoderEmbedding sums each token's rows of the token, position and token-type tables.
func (b *Backend) EncoderEmbedding(out, tokens, positions, types backend.Tensor, st backend.Step) error {
	const op = "encoder embedding"
	o, err := activation(op, "out", out)
	if err != nil {
		return err
	}
	s, err := stepOf(op, st)
	if err != nil {
		return err
	}
	meta := s.meta
	if meta.TokenTypes != nil && len(meta.TokenTypes) != len(meta.Tokens) {
		return fmt.Errorf("cpu %s: %d token types for %d tokens", op, len(meta.TokenTypes), len(meta.Tokens))
	}
	if o.rows() != len(meta.Tokens) {
		return fmt.Errorf("cpu %s: out %v for %d tokens", op, o.shape, len(meta.Tokens))
	}
	dim := o.cols()
	clear(o.f32[:len(meta.Tokens)*dim])
	row := make([]float32, dim)
	add := func(what string, table backend.Tensor, ids func(t int) int32) error {
		if table == nil {
			return nil
		}
		w, err := matrix(op, what, table)
		if err != nil {
			return err
		}
		if w.Cols != dim {
			return fmt.Errorf("cpu %s: %s table of %d columns for rows of %d", op, what, w.Cols, dim)
		}
		rb, err := w.Type.RowBytes(w.Cols)
		if err != nil {
			return fmt.Errorf("cpu %s: %s: %w", op, what, err)
		}
		for t := range meta.Tokens {
			id := ids(t)
			if id < 0 || int(id) >= w.Rows {
				return fmt.Errorf("cpu %s: token %d: %s id %d outside the table's %d rows", op, t, what, id, w.Rows)
			}
			if err := quant.Dequantize(w.Type, w.Data[int(id)*rb:][:rb], row); err != nil {
				return fmt.Errorf("cpu %s: %s: %w", op, what, err)
			}
			for i, v := range row {
				o.f32[t*dim+i] += v
			}
		}
		return nil
	}
	if err := add("token", tokens, func(t int) int32 { return meta.Tokens[t] }); err != nil {
		return err
	}
	if err := add("position", positions, func(t int) int32 { return meta.Positions[t] }); err != nil {
		return err
	}
	return add("token type", types, func(t int) int32 {
		if meta.TokenTypes == nil {
			return 0
		}
		return meta.TokenTypes[t]
	})
}

// LayerNorm normalizes the rows of x + add into out, with weight and bias.
func (b *Backend) LayerNorm(out, x, add, weight, bias backend.Tensor, eps float32) error {
	o, xs, w, err := normOperands("layernorm", out, x, weight)
	if err != nil {
		return err
	}
	bs, err := activation("layernorm", "bias", bias)
	if err != nil {
		return err
	}
	var as []float32
	if add != nil {
		a, err := activation("layernorm", "add", add)
		if err != nil {
			return err
		}
		if err := sameShape("layernorm", a, xs); err != nil {
			return err
		}
		as = a.f32
	}
	return cpu.LayerNorm(b.pool, o.f32, xs.f32, as, w.f32, bs.f32, xs.rows(), eps)
}

// GELU applies the erf form of GELU element-wise.
func (b *Backend) GELU(out, x backend.Tensor) error {
	o, err := activation("gelu", "out", out)
	if err != nil {
		return err
	}
	xs, err := activation("gelu", "x", x)
	if err != nil {
		return err
	}
	if err := sameShape("gelu", o, xs); err != nil {
		return err
	}
	n := xs.rows() * xs.cols()
	return cpu.GELU(b.pool, o.f32[:n], xs.f32[:n])
}

// BidirectionalAttention attends every token over its whole sequence.
func (b *Backend) BidirectionalAttention(out, q, k, v backend.Tensor, heads int, scale, maxBias float32, st backend.Step) error {
	const op = "bidirectional attention"
	var ts [4]*tensor
	for i, t := range []backend.Tensor{out, q, k, v} {
		var err error
		if ts[i], err = activation(op, [...]string{"out", "q", "k", "v"}[i], t); err != nil {
			return err
		}
		if err := sameShape(op, ts[i], ts[0]); err != nil {
			return err
		}
	}
	s, err := stepOf(op, st)
	if err != nil {
		return err
	}
	if heads <= 0 || ts[0].cols()%heads != 0 || ts[0].rows() != s.meta.NumTokens() {
		return fmt.Errorf("cpu %s: %v for %d heads and %d tokens", op, ts[0].shape, heads, s.meta.NumTokens())
	}
	var slopes []float32
	if maxBias > 0 {
		slopes = backend.ALiBiSlopes(heads, maxBias)
	}
	return cpu.BidirectionalAttention(b.pool, ts[0].f32, ts[1].f32, ts[2].f32, ts[3].f32, s.meta.QueryStarts, heads, ts[0].cols()/heads, scale, slopes)
}

// GELUGLU computes GELU(gate) * up with the erf form of GELU.
func (b *Backend) GELUGLU(out, gate, up backend.Tensor) error {
	var ts [3]*tensor
	for i, t := range []backend.Tensor{out, gate, up} {
		var err error
		if ts[i], err = activation("gelu glu", [...]string{"out", "gate", "up"}[i], t); err != nil {
			return err
		}
		if err := sameShape("gelu glu", ts[i], ts[0]); err != nil {
			return err
		}
	}
	n := ts[0].rows() * ts[0].cols()
	return cpu.GELUGLU(b.pool, ts[0].f32[:n], ts[1].f32[:n], ts[2].f32[:n])
}

// PoolRows pools each sequence's rows of x into dst.
func (b *Backend) PoolRows(dst []float32, x backend.Tensor, mode backend.PoolMode, st backend.Step) error {
	xs, err := activation("pool rows", "x", x)
	if err != nil {
		return err
	}
	s, err := stepOf("pool rows", st)
	if err != nil {
		return err
	}
	return cpu.PoolRows(dst, xs.f32, xs.cols(), s.meta.QueryStarts, mode == backend.PoolCLS, mode == backend.PoolLast)
}

var _ backend.RowReader = (*Backend)(nil)

// ReadRows copies x's rows into dst.
func (b *Backend) ReadRows(dst []float32, x backend.Tensor) error {
	xs, err := activation("read rows", "x", x)
	if err != nil {
		return err
	}
	if n := xs.rows() * xs.cols(); len(dst) != n {
		return fmt.Errorf("cpu read rows: %d values for %v", len(dst), xs.shape)
	}
	copy(dst, xs.f32)
	return nil
}
