package cuda

import "fmt"

// The launchers of the kernels in kernels/gemv.cu: the GEMV kernels that multiply a few
// activation rows by a 16-bit weight (alone, three weights at once, or gate and up fused
// with their SwiGLU), the bias add, and the plain attention kernel for small heads.

// GEMVMaxRows is the most activation rows the GEMV kernels take (gemv_n1 ... gemv_n8 in gemv.cu).
const GEMVMaxRows = 8

// GEMVMulti is the most weights one gemvm_* launch takes (y0..y2 and w0..w2 in gemv.cu).
const GEMVMulti = 3

// gemvThreads is the GEMV kernels' block size (GEMV_THREADS in gemv.cu).
const gemvThreads = 256

// gemvKernel returns the GEMV kernel for n (1..GEMVMaxRows) token rows of a 16-bit weight
// of type dt, and the weight rows one block of it computes (the R of its GEMV_KERNEL line
// in gemv.cu): n is rounded up to a bucket of 1, 2, 4 or 8 rows. One token row takes 8
// weight rows a block: more loads in flight per thread (measured fastest on the H200 for
// every decode shape of llama-3.1-8b and llama-3.2-1b but 8192 x 2048).
func gemvKernel(n int, dt DType) (name string, rows int) {
	rows = 4
	if n <= 1 {
		rows = 8
	}
	return "gemv_" + gemvBucket(n) + "_" + suffix(dt), rows
}

// gemvBucket names the bucket of token rows n falls into (n1, n2, n4 or n8).
func gemvBucket(n int) string {
	switch {
	case n <= 1:
		return "n1"
	case n <= 2:
		return "n2"
	case n <= 4:
		return "n4"
	}
	return "n8"
}

// gemvMultiKernel returns the gemvm_* kernel for n (1..GEMVMaxRows) token rows of 16-bit
// weights of type dt, and the weight rows one of its blocks computes.
func gemvMultiKernel(n int, dt DType) (name string, rows int) {
	name, rows = gemvKernel(n, dt)
	return "gemvm_" + name[len("gemv_"):], rows
}

// gemvGLUKernel returns the gemvglu_* kernel for n (1..GEMVMaxRows) token rows of 16-bit
// gate and up weights of type dt, and the rows of each weight one of its blocks computes
// (the R of its GEMVGLU_KERNEL line: 2R weight rows in flight).
func gemvGLUKernel(n int, dt DType) (name string, rows int) {
	rows = 2
	if n <= 1 {
		rows = 1
	}
	return "gemvglu_" + gemvBucket(n) + "_" + suffix(dt), rows
}

// GEMV computes y = x · wᵀ for n (1..GEMVMaxRows) rows of float32 x ([n][k], k a
// multiple of 8) and a 16-bit weight w ([m][k], F16 or BF16) into float32 y ([n][m]).
func (o *Ops) GEMV(y, x, w Buffer, n, k, m int) error {
	if err := gemvShape("gemv", n, k); err != nil {
		return err
	}
	if err := firstErr(need("gemv", "y", y, n*m, F32), need("gemv", "x", x, n*k, F32), need("gemv", "w", w, m*k, F16, BF16)); err != nil {
		return err
	}
	name, rows := gemvKernel(n, w.DType)
	return o.Dev.Launch(o.Kern.mod, name, Dim3{(m + rows - 1) / rows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
		y, x, w, n, k, m)
}

// GEMVMulti computes y[j] = x · w[j]ᵀ for up to GEMVMulti 16-bit weights of one type
// (w[j] [m[j]][k]) in one launch, a grid over their concatenated rows, for n
// (1..GEMVMaxRows) rows of float32 x ([n][k], k a multiple of 8). An unused slot has
// m[j] = 0 and repeats a valid pair of buffers.
func (o *Ops) GEMVMulti(y [GEMVMulti]Buffer, x Buffer, w [GEMVMulti]Buffer, n, k int, m [GEMVMulti]int) error {
	if err := gemvShape("gemv multi", n, k); err != nil {
		return err
	}
	if err := need("gemv multi", "x", x, n*k, F32); err != nil {
		return err
	}
	name, rows := gemvMultiKernel(n, w[0].DType)
	blocks := 0
	for j := range GEMVMulti {
		if err := firstErr(need("gemv multi", "y", y[j], n*m[j], F32), need("gemv multi", "w", w[j], m[j]*k, w[0].DType)); err != nil {
			return err
		}
		blocks += (m[j] + rows - 1) / rows
	}
	return o.Dev.Launch(o.Kern.mod, name, Dim3{blocks, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
		y[0], y[1], y[2], x, w[0], w[1], w[2], n, k, m[0], m[1], m[2])
}

// GEMVSwiGLU computes out = silu(x · gateᵀ) * (x · upᵀ) in one launch for n
// (1..GEMVMaxRows) rows of float32 x ([n][k], k a multiple of 8) and 16-bit gate and up
// weights of one type ([m][k]) into float32 out ([n][m]).
func (o *Ops) GEMVSwiGLU(out, x, gate, up Buffer, n, k, m int) error {
	if err := gemvShape("gemv swiglu", n, k); err != nil {
		return err
	}
	if err := firstErr(need("gemv swiglu", "out", out, n*m, F32), need("gemv swiglu", "x", x, n*k, F32),
		need("gemv swiglu", "gate", gate, m*k, F16, BF16), need("gemv swiglu", "up", up, m*k, gate.DType)); err != nil {
		return err
	}
	name, rows := gemvGLUKernel(n, gate.DType)
	return o.Dev.Launch(o.Kern.mod, name, Dim3{(m + rows - 1) / rows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
		out, x, gate, up, n, k, m)
}

// gemvShape checks the activation shape of a GEMV launch.
func gemvShape(op string, n, k int) error {
	if n < 1 || n > GEMVMaxRows || k <= 0 || k%8 != 0 {
		return fmt.Errorf("cuda %s: bad shape n=%d k=%d", op, n, k)
	}
	return nil
}

// AddBias adds bias (F32 [cols]) to every row of x (F32 [rows][cols]).
func (o *Ops) AddBias(x, bias Buffer, rows, cols int) error {
	if err := firstErr(need("add bias", "x", x, rows*cols, F32), need("add bias", "bias", bias, cols, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "add_bias_f32", Dim3{gridFor(rows * cols), 1, 1}, Dim3{threads, 1, 1}, 0,
		x, bias, uint64(rows), cols)
}

// AttentionSmall runs plain causal attention over the paged cache (attn_small_*), for
// head sizes the tiled kernels do not take (any up to MaxHeadDim; tiny models such as
// stories260K): one block per head and token, the token's scores in shared memory sized
// for sharedContext positions, at least the longest context. Of a it reads Out and Q
// (rows of Heads·HeadDim float32s: the strides are not read), Tokens, Seqs, Heads, Cache,
// SeqStarts, ContextLens, BlockTables, MaxBlocks and Scale.
func (o *Ops) AttentionSmall(a PrefillArgs, sharedContext int) error {
	c := a.Cache
	if err := firstErr(c.Check("attention small"), c.refuseQuantized("attention small")); err != nil {
		return err
	}
	if c.HeadDim > MaxHeadDim {
		return fmt.Errorf("cuda attention small: head dim %d above %d", c.HeadDim, MaxHeadDim)
	}
	n := a.Tokens * a.Heads * c.HeadDim
	if err := firstErr(need("attention small", "out", a.Out, n, F32), need("attention small", "q", a.Q, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "attn_small_"+suffix(c.K.DType), Dim3{a.Heads, a.Tokens, 1}, Dim3{128, 1, 1}, 4*sharedContext,
		a.Out, a.Q, c.K, c.V, a.BlockTables, a.MaxBlocks, a.SeqStarts, a.Seqs, a.ContextLens,
		a.Heads, c.KVHeads, c.HeadDim, c.BlockSize, a.Scale)
}
