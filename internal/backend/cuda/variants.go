package cuda

import "fmt"

// AttentionWindow runs the varlen prefill kernel's windowed, soft-capped instance
// (attn_window_* in attention.cu) for any mix of prefill chunks and decode tokens: a token
// at context index i attends to the positions max(0, i-window+1)..i (all of 0..i when
// window is 0), each score scale·q·k replaced by softcap·tanh(score/softcap) when softcap
// > 0. Out is F32. The kernel is the plain scalar-FMA one: architectures that need these
// variations (Gemma, Mistral's window) take it on every step.
func (o *Ops) AttentionWindow(a PrefillArgs, window int, softcap float32) error {
	c := a.Cache
	if err := c.checkTiled("attention window"); err != nil {
		return err
	}
	hd := c.HeadDim
	if a.Tokens <= 0 || a.Seqs <= 0 || a.Heads <= 0 || a.Heads%c.KVHeads != 0 || a.MaxQueryLen <= 0 || a.MaxBlocks <= 0 {
		return fmt.Errorf("cuda attention window: bad shape tokens=%d seqs=%d heads=%d kvHeads=%d maxQuery=%d maxBlocks=%d",
			a.Tokens, a.Seqs, a.Heads, c.KVHeads, a.MaxQueryLen, a.MaxBlocks)
	}
	if window < 0 || softcap < 0 {
		return fmt.Errorf("cuda attention window: window %d and softcap %g must not be negative", window, softcap)
	}
	if a.QStride < a.Heads*hd || a.OutStride < a.Heads*hd {
		return fmt.Errorf("cuda attention window: strides q=%d out=%d below %d", a.QStride, a.OutStride, a.Heads*hd)
	}
	last := a.Tokens - 1
	if err := firstErr(need("attention window", "out", a.Out, last*a.OutStride+a.Heads*hd, F32),
		need("attention window", "q", a.Q, last*a.QStride+a.Heads*hd, F32),
		need("attention window", "seq starts", a.SeqStarts, a.Seqs+1, I32),
		need("attention window", "context lengths", a.ContextLens, a.Seqs, I32),
		need("attention window", "block tables", a.BlockTables, a.Seqs*a.MaxBlocks, I32)); err != nil {
		return err
	}
	if c.Quantized() {
		return o.prefillQuantized(a, window, softcap)
	}
	tiles := (a.MaxQueryLen + prefillTile - 1) / prefillTile
	return o.Dev.Launch(o.Kern.mod, "attn_window_"+suffix(c.K.DType), Dim3{tiles, a.Heads, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.SeqStarts, a.ContextLens,
		a.Heads, c.KVHeads, hd, c.BlockSize, a.Scale, window, softcap)
}

// GeGLU writes out[i] = gelu(gate[i]) * up[i] over n float32 values, GELU in its tanh
// approximation; out may be gate or up.
func (o *Ops) GeGLU(out, gate, up Buffer, n int) error {
	if n <= 0 {
		return fmt.Errorf("cuda geglu: bad length %d", n)
	}
	if err := firstErr(need("geglu", "out", out, n, F32), need("geglu", "gate", gate, n, F32), need("geglu", "up", up, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "geglu_f32", Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0, out, gate, up, uint64(n))
}

// Scale multiplies n float32 values of x by s in place.
func (o *Ops) Scale(x Buffer, s float32, n int) error {
	if n <= 0 {
		return fmt.Errorf("cuda scale: bad length %d", n)
	}
	if err := need("scale", "x", x, n, F32); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "scale_f32", Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0, x, s, uint64(n))
}

// SumSquares writes the sum of the squares of each of rows rows of dim float32 values of x
// into out (rows values).
func (o *Ops) SumSquares(out, x Buffer, rows, dim int) error {
	if rows <= 0 || dim <= 0 {
		return fmt.Errorf("cuda sum squares: bad shape rows=%d dim=%d", rows, dim)
	}
	if err := firstErr(need("sum squares", "out", out, rows, F32), need("sum squares", "x", x, rows*dim, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "sumsq_f32", Dim3{rows, 1, 1}, Dim3{normThreads(dim), 1, 1}, 0, out, x, dim)
}

// RMSNormSplit normalizes rows rows of dim float32 values of x in place by their whole
// rows' summed squares ss over n values: x / sqrt(ss/n + eps) * weight.
func (o *Ops) RMSNormSplit(x, ss, weight Buffer, rows, dim, n int, eps float32) error {
	if rows <= 0 || dim <= 0 || n <= 0 {
		return fmt.Errorf("cuda rmsnorm split: bad shape rows=%d dim=%d n=%d", rows, dim, n)
	}
	if err := firstErr(need("rmsnorm split", "x", x, rows*dim, F32), need("rmsnorm split", "sum squares", ss, rows, F32),
		need("rmsnorm split", "weight", weight, dim, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "rmsnorm_split_f32", Dim3{rows, 1, 1}, Dim3{normThreads(dim), 1, 1}, 0, x, ss, weight, dim, n, eps)
}
