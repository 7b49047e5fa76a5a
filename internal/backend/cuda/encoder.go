package cuda

import "fmt"

// The ops of bidirectional encoders (kernels/encoder.cu).

// maxAttnKeys bounds the keys one sequence of BidirectionalAttention may have: its scores
// take one float each of the block's shared memory (under the 48 KiB a block may take without opting in).
const maxAttnKeys = 11 << 10

// LayerNorm writes ((y - mean) / sqrt(var + eps)) * weight + bias to out for rows rows of
// dim float32 values, y = x + add (add may be the zero Buffer). out may alias x or add.
func (o *Ops) LayerNorm(out, x, add, weight, bias Buffer, rows, dim int, eps float32) error {
	if rows <= 0 || dim <= 0 {
		return fmt.Errorf("cuda layernorm: bad shape rows=%d dim=%d", rows, dim)
	}
	if err := firstErr(need("layernorm", "out", out, rows*dim, F32), need("layernorm", "x", x, rows*dim, F32),
		need("layernorm", "weight", weight, dim, F32), need("layernorm", "bias", bias, dim, F32)); err != nil {
		return err
	}
	if add.Ptr != 0 {
		if err := need("layernorm", "add", add, rows*dim, F32); err != nil {
			return err
		}
	}
	return o.Dev.Launch(o.Kern.mod, "layernorm_f32", Dim3{rows, 1, 1}, Dim3{normThreads(dim), 1, 1}, 0,
		out, x, add, weight, bias, dim, eps)
}

// GELU writes x * Φ(x) (the erf form) to out over x's values; out may be x.
func (o *Ops) GELU(out, x Buffer) error {
	n := x.Len
	if err := firstErr(need("gelu", "x", x, 1, F32), need("gelu", "out", out, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "gelu_f32", Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0, out, x, uint64(n))
}

// GELUGLU writes GELU(gate) * up (the erf form of GELU) to out over gate's values; out may
// be gate or up.
func (o *Ops) GELUGLU(out, gate, up Buffer) error {
	n := gate.Len
	if err := firstErr(need("gelu glu", "gate", gate, 1, F32), need("gelu glu", "up", up, n, F32), need("gelu glu", "out", out, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "gelu_glu_f32", Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0, out, gate, up, uint64(n))
}

// BidirectionalAttention lets each of tokens tokens attend to every token of its sequence
// (queryStarts: seqs+1 I32 offsets, the longest sequence maxLen tokens): q, k, v and out
// are [tokens][heads*headDim] float32. maxBias > 0 adds ALiBi's bias (see
// backend.ALiBiSlopes); 0 none.
func (o *Ops) BidirectionalAttention(out, q, k, v, queryStarts Buffer, tokens, seqs, maxLen, heads, headDim int, scale, maxBias float32) error {
	if tokens <= 0 || seqs <= 0 || heads <= 0 || headDim <= 0 || maxLen <= 0 {
		return fmt.Errorf("cuda bidirectional attention: bad shape tokens=%d seqs=%d heads=%d head=%d", tokens, seqs, heads, headDim)
	}
	if maxLen > maxAttnKeys {
		return fmt.Errorf("cuda bidirectional attention: a sequence of %d tokens, more than %d", maxLen, maxAttnKeys)
	}
	n := tokens * heads * headDim
	if err := firstErr(need("bidirectional attention", "out", out, n, F32), need("bidirectional attention", "q", q, n, F32),
		need("bidirectional attention", "k", k, n, F32), need("bidirectional attention", "v", v, n, F32),
		need("bidirectional attention", "query starts", queryStarts, seqs+1, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "bidir_attn_f32", Dim3{tokens, heads, 1}, Dim3{128, 1, 1}, 4*maxLen,
		out, q, k, v, queryStarts, seqs, heads, headDim, scale, maxBias)
}

// PoolRows writes one row per sequence of x ([tokens][dim] float32) to out ([seqs][dim]):
// the mean of the sequence's rows (mode 0), its first (1) or its last (2).
func (o *Ops) PoolRows(out, x, queryStarts Buffer, seqs, dim, mode int) error {
	if seqs <= 0 || dim <= 0 || mode < 0 || mode > 2 {
		return fmt.Errorf("cuda pool rows: bad shape seqs=%d dim=%d mode=%d", seqs, dim, mode)
	}
	if err := firstErr(need("pool rows", "out", out, seqs*dim, F32), need("pool rows", "x", x, dim, F32),
		need("pool rows", "query starts", queryStarts, seqs+1, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "pool_rows_f32", Dim3{seqs, 1, 1}, Dim3{threads, 1, 1}, 0, out, x, queryStarts, dim, mode)
}
