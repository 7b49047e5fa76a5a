package cuda

import (
	"fmt"
)

// Ops launches the project's kernels and GEMMs on one device's stream. Every method queues
// work and returns without waiting; all must be called inside Device.Do. Shapes and
// dtypes are checked here; the contents of index buffers (tokens, slots, block tables,
// positions) are not, so the caller validates them before upload.
type Ops struct {
	Dev  *Device
	Kern *Kernels
	BLAS *BLAS
	// X8 is the int8 GEMV layout's rounded x (AllocX8); empty until reserved.
	X8 X8Scratch
	// x8Of says whose rounding X8 holds when a producing op wrote it (RMSNormX8,
	// SwiGLUX8), so that the int8 GEMV reading that op's output skips its own rounding.
	x8Of x8Copy
}

// x8Copy records that Ops.X8 holds the int8 rounding of count float32 values at src,
// written by the op queued as the device's work number seq (Device.Seq): while nothing
// else has been queued since, the copy cannot be stale.
type x8Copy struct {
	src   uint64
	count int
	seq   uint64
}

// threads is the block size of the row and element-wise kernels.
const threads = 256

// gridFor returns a grid-stride launch size for n elements.
func gridFor(n int) int {
	return max(1, min((n+threads-1)/threads, 65535))
}

// need checks that b holds at least n elements of one of dtypes.
func need(op, what string, b Buffer, n int, dtypes ...DType) error {
	if b.Ptr == 0 {
		return fmt.Errorf("cuda %s: %s: no buffer", op, what)
	}
	ok := false
	for _, t := range dtypes {
		ok = ok || b.DType == t
	}
	if !ok {
		return fmt.Errorf("cuda %s: %s is %s, want one of %v", op, what, b.DType, dtypes)
	}
	if b.Len < n {
		return fmt.Errorf("cuda %s: %s holds %d elements, need %d", op, what, b.Len, n)
	}
	return nil
}

// suffix returns the kernel-name suffix of a float dtype.
func suffix(t DType) string { return t.String() }

// Embedding writes out[i] = table[tokens[i]] as float32 for n tokens; table is [vocab][dim]
// in F32, F16, BF16 or a block type (rows of whole blocks). Ids outside the vocabulary give
// zero rows.
func (o *Ops) Embedding(out, table, tokens Buffer, n, vocab, dim int) error {
	if n <= 0 || vocab <= 0 || dim <= 0 {
		return fmt.Errorf("cuda embedding: bad shape n=%d vocab=%d dim=%d", n, vocab, dim)
	}
	if Quantized(table.DType) {
		if err := quantShape("embedding", table.DType, dim); err != nil {
			return err
		}
	}
	if err := firstErr(need("embedding", "out", out, n*dim, F32),
		need("embedding", "table", table, vocab*dim, append([]DType{F32, F16, BF16}, quantizedTypes...)...),
		need("embedding", "tokens", tokens, n, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "embed_"+suffix(table.DType), Dim3{n, 1, 1}, Dim3{threads, 1, 1}, 0,
		out, table, tokens, vocab, dim)
}

// GatherRows writes out[i] = in[idx[i]] for rows rows of dim float32 values (the logits
// gather: the hidden rows whose logits are wanted).
func (o *Ops) GatherRows(out, in, idx Buffer, rows, dim int) error {
	if rows <= 0 || dim <= 0 {
		return fmt.Errorf("cuda gather: bad shape rows=%d dim=%d", rows, dim)
	}
	if err := firstErr(need("gather", "out", out, rows*dim, F32), need("gather", "in", in, dim, F32),
		need("gather", "idx", idx, rows, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "gather_rows_f32", Dim3{rows, 1, 1}, Dim3{threads, 1, 1}, 0, out, in, idx, dim)
}

// Cast converts the float32 buffer in into out (F16 or BF16), element for element.
func (o *Ops) Cast(out, in Buffer) error {
	n := in.Len
	if err := firstErr(need("cast", "in", in, 1, F32), need("cast", "out", out, n, F16, BF16)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "cast_f32_"+suffix(out.DType), Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, in, uint64(n))
}

// Widen computes out = (float32)in over a 16-bit buffer (F16 or BF16) into float32 out of
// at least its length.
func (o *Ops) Widen(out, in Buffer) error {
	n := in.Len
	if err := firstErr(need("widen", "in", in, 1, F16, BF16), need("widen", "out", out, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "widen_"+suffix(in.DType)+"_f32", Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, in, uint64(n))
}

// Add computes out = a + b over float32 buffers of equal length; out may be a or b.
func (o *Ops) Add(out, a, b Buffer) error {
	n := out.Len
	if err := firstErr(need("add", "out", out, 1, F32), need("add", "a", a, n, F32), need("add", "b", b, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "add_f32", Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0, out, a, b, uint64(n))
}

// RMSNorm normalizes rows rows of dim values: when x is non-zero it first adds x into
// residual (the fused residual step), then writes residual / rms * weight to out (F32, F16
// or BF16). residual, x and weight are float32. out may be residual when x is zero.
func (o *Ops) RMSNorm(out, residual, x, weight Buffer, rows, dim int, eps float32) error {
	if err := firstErr(need("rmsnorm", "out", out, rows*dim, F32, F16, BF16), checkRMSNorm(out, residual, x, weight, rows, dim)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "rmsnorm_"+suffix(out.DType), Dim3{rows, 1, 1}, Dim3{normThreads(dim), 1, 1}, 0,
		out, residual, x, weight, dim, eps)
}

// RMSNormShadow is RMSNorm into float32 out that also writes the normalized values
// rounded to shadow's type (F16 or BF16) into shadow, the copy a following cuBLAS GEMM
// reads instead of casting out.
func (o *Ops) RMSNormShadow(out, shadow, residual, x, weight Buffer, rows, dim int, eps float32) error {
	if err := firstErr(need("rmsnorm", "out", out, rows*dim, F32), need("rmsnorm", "shadow", shadow, rows*dim, F16, BF16),
		checkRMSNorm(out, residual, x, weight, rows, dim)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "rmsnorm_f32_sh_"+suffix(shadow.DType), Dim3{rows, 1, 1}, Dim3{normThreads(dim), 1, 1}, 0,
		out, shadow, residual, x, weight, dim, eps)
}

// RMSNormX8 is RMSNorm into float32 out that also writes the int8 layout's rounding of
// the normalized values into o.X8 (bytes and scales equal to QuantizeX8's of out), for the
// int8 GEMV that reads out next (GEMVQWith, GEMVQMultiWith: they then launch no rounding
// of their own). dim must be a multiple of 16 and o.X8 must hold rows*dim values.
func (o *Ops) RMSNormX8(out, residual, x, weight Buffer, rows, dim int, eps float32) error {
	if err := firstErr(need("rmsnorm", "out", out, rows*dim, F32), checkRMSNorm(out, residual, x, weight, rows, dim), o.checkX8("rmsnorm", rows*dim)); err != nil {
		return err
	}
	if err := o.Dev.Launch(o.Kern.mod, "rmsnorm_f32_x8", Dim3{rows, 1, 1}, Dim3{normThreads(dim), 1, 1}, 0,
		out, o.X8.Q, o.X8.D, residual, x, weight, dim, eps); err != nil {
		return err
	}
	o.markX8(out, rows*dim)
	return nil
}

// checkX8 reports why o.X8 cannot take the rounding of count values, if it cannot.
func (o *Ops) checkX8(op string, count int) error {
	if count <= 0 || count%16 != 0 {
		return fmt.Errorf("cuda %s x8: %d values is not a positive multiple of 16", op, count)
	}
	if !o.X8.Holds(count) {
		return fmt.Errorf("cuda %s x8: the x8 scratch holds %d values, not %d", op, o.X8.Q.Len*4, count)
	}
	return nil
}

// checkRMSNorm checks the operands RMSNorm and RMSNormShadow share (out's type is each
// one's own check): the shape, the float32 residual, x (when given) and weight, and that out
// does not alias residual when x is added.
func checkRMSNorm(out, residual, x, weight Buffer, rows, dim int) error {
	if rows <= 0 || dim <= 0 {
		return fmt.Errorf("cuda rmsnorm: bad shape rows=%d dim=%d", rows, dim)
	}
	if err := firstErr(need("rmsnorm", "residual", residual, rows*dim, F32), need("rmsnorm", "weight", weight, dim, F32)); err != nil {
		return err
	}
	if x.Ptr == 0 {
		return nil
	}
	if err := need("rmsnorm", "x", x, rows*dim, F32); err != nil {
		return err
	}
	if out.Ptr == residual.Ptr {
		return fmt.Errorf("cuda rmsnorm: out may not alias residual when x is added")
	}
	return nil
}

// normThreads returns the RMSNorm block size for rows of dim values: about 4 values a
// thread (a multiple of 32, from 64 to 1024), so that rows up to 8192 values stay in
// registers (RMS_MAXV in norm.cu).
func normThreads(dim int) int {
	n := (dim + 3) / 4
	n = (n + 31) / 32 * 32
	return min(1024, max(64, n))
}

// SwiGLU writes out[r][c] = silu(gate[r*inStride+c]) * up[r*inStride+c] for rows x dim
// values; out is contiguous [rows][dim] (F32, F16 or BF16), gate and up float32 (views
// into one fused buffer are fine).
func (o *Ops) SwiGLU(out, gate, up Buffer, rows, dim, inStride int) error {
	if rows <= 0 || dim <= 0 || inStride < dim {
		return fmt.Errorf("cuda swiglu: bad shape rows=%d dim=%d stride=%d", rows, dim, inStride)
	}
	in := (rows-1)*inStride + dim
	if err := firstErr(need("swiglu", "out", out, rows*dim, F32, F16, BF16),
		need("swiglu", "gate", gate, in, F32), need("swiglu", "up", up, in, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "swiglu_"+suffix(out.DType), Dim3{gridFor(rows * dim), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, gate, up, rows, dim, inStride)
}

// SwiGLUShadow writes out[i] = silu(gate[i]) * up[i] over n float32 values and the same
// values rounded to shadow's type (F16 or BF16) into shadow; out may be gate or up.
func (o *Ops) SwiGLUShadow(out, shadow, gate, up Buffer, n int) error {
	if n <= 0 {
		return fmt.Errorf("cuda swiglu: bad length %d", n)
	}
	if err := firstErr(need("swiglu", "out", out, n, F32), need("swiglu", "shadow", shadow, n, F16, BF16),
		need("swiglu", "gate", gate, n, F32), need("swiglu", "up", up, n, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "swiglu_sh_"+suffix(shadow.DType), Dim3{gridFor(n), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, shadow, gate, up, uint64(n))
}

// SwiGLUX8 writes out[i] = silu(gate[i]) * up[i] over n float32 values (a multiple of 16)
// and their int8 rounding into o.X8, as RMSNormX8 does for the norm: the down projection's
// int8 GEMV then reads it without a rounding launch. out may be gate or up.
func (o *Ops) SwiGLUX8(out, gate, up Buffer, n int) error {
	if err := firstErr(o.checkX8("swiglu", n), need("swiglu", "out", out, n, F32),
		need("swiglu", "gate", gate, n, F32), need("swiglu", "up", up, n, F32)); err != nil {
		return err
	}
	units := n / 16
	if err := o.Dev.Launch(o.Kern.mod, "swiglu_x8_f32", Dim3{gridFor(units), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, o.X8.Q, o.X8.D, gate, up, uint64(units)); err != nil {
		return err
	}
	o.markX8(out, n)
	return nil
}

// MatMulT computes y = x · wᵀ with cuBLAS (see BLAS.MatMulT).
func (o *Ops) MatMulT(y, x, w Buffer, n, k, m int) error {
	if o.BLAS == nil {
		return fmt.Errorf("cuda matmul: no cuBLAS handle")
	}
	if o.Dev.times != nil {
		return o.Dev.timed(fmt.Sprintf("cublas %s n<=%d k=%d m=%d", x.DType, pow2Bucket(n), k, m),
			func() error { return o.BLAS.MatMulT(y, x, w, n, k, m) })
	}
	return o.BLAS.MatMulT(y, x, w, n, k, m)
}

// SparseMatMulT computes d = b · wᵀ for a 2:4 weight w through cuSPARSELt (Sparse.MatMulT),
// timed in the op profile like MatMulT.
func (o *Ops) SparseMatMulT(s *Sparse, d, b Buffer, w *SparseWeight, cols int) error {
	if s == nil {
		return fmt.Errorf("cusparselt matmul: no cuSPARSELt handle")
	}
	if o.Dev.times != nil {
		return o.Dev.timed(fmt.Sprintf("cusparselt %s n=%d k=%d m=%d", b.DType, cols, w.Cols, w.Rows),
			func() error { return s.MatMulT(d, b, w, cols) })
	}
	return s.MatMulT(d, b, w, cols)
}

// MatMulTStrided computes y = x · wᵀ as MatMulT does into a block of columns of a wider y:
// row i of the product is written at y[i*ldy:], ldy >= m.
func (o *Ops) MatMulTStrided(y, x, w Buffer, n, k, m, ldy int) error {
	if o.BLAS == nil {
		return fmt.Errorf("cuda matmul: no cuBLAS handle")
	}
	if o.Dev.times != nil {
		return o.Dev.timed(fmt.Sprintf("cublas %s n<=%d k=%d m=%d", x.DType, pow2Bucket(n), k, m),
			func() error { return o.BLAS.MatMulTStrided(y, x, w, n, k, m, ldy) })
	}
	return o.BLAS.MatMulTStrided(y, x, w, n, k, m, ldy)
}

// ArgmaxParts is the slices of a row argmax_part_f32 reduces in parallel (ARGMAX_PARTS
// in sample.cu); Argmax's work buffer holds two float32s per slice and row.
const ArgmaxParts = 32

// Argmax writes out[r] = the index of the largest of row r's vocab logits (float32;
// lowest index among ties; NaN never wins) among the tokens its mask allows, through work
// (F32, at least 2·ArgmaxParts values per row). masks is a step's masks as PackMasks lays
// them out, or the zero Buffer for none; a row none of whose allowed logits is a number
// gets 0.
func (o *Ops) Argmax(out, logits, work Buffer, rows, vocab int, masks Buffer) error {
	if rows <= 0 || vocab <= 0 {
		return fmt.Errorf("cuda argmax: bad shape rows=%d vocab=%d", rows, vocab)
	}
	if err := firstErr(need("argmax", "out", out, rows, I32), need("argmax", "logits", logits, rows*vocab, F32),
		need("argmax", "work", work, 2*ArgmaxParts*rows, F32), needMasks("argmax", masks, rows)); err != nil {
		return err
	}
	if err := o.Dev.Launch(o.Kern.mod, "argmax_part_f32", Dim3{ArgmaxParts, rows, 1}, Dim3{256, 1, 1}, 0, work, logits, vocab, masks); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "argmax_f32", Dim3{rows, 1, 1}, Dim3{32, 1, 1}, 0, out, work)
}

// SampleParams holds per-row sampling parameters on the device, one element per row.
type SampleParams struct {
	Temperature Buffer // F32, > 0 (use Argmax for greedy rows)
	TopK        Buffer // I32, <= 0 for no limit
	TopP        Buffer // F32, >= 1 for no limit
	Uniform     Buffer // F32 in [0, 1): the random draw of each row
	// Masks holds the rows' vocabulary masks as PackMasks lays them out; the zero Buffer
	// for none.
	Masks Buffer
}

// Sample draws one token per row of logits (float32 [rows][vocab]) into out (I32) from the
// temperature-scaled softmax restricted by top-k, then top-p (ties at a threshold kept),
// by inverting the cumulative distribution in index order at the row's uniform draw. A
// token a row's mask disallows counts as a logit of -inf; a masked row that allows no
// finite logit draws 0.
func (o *Ops) Sample(out, logits Buffer, rows, vocab int, p SampleParams) error {
	if rows <= 0 || vocab <= 0 {
		return fmt.Errorf("cuda sample: bad shape rows=%d vocab=%d", rows, vocab)
	}
	if err := firstErr(need("sample", "out", out, rows, I32), need("sample", "logits", logits, rows*vocab, F32),
		need("sample", "temperature", p.Temperature, rows, F32), need("sample", "top-k", p.TopK, rows, I32),
		need("sample", "top-p", p.TopP, rows, F32), need("sample", "uniform", p.Uniform, rows, F32),
		needMasks("sample", p.Masks, rows)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "sample_f32", Dim3{rows, 1, 1}, Dim3{1024, 1, 1}, 0,
		out, logits, vocab, p.Temperature, p.TopK, p.TopP, p.Uniform, p.Masks)
}

// needMasks checks a masks buffer of rows rows: the zero Buffer, or I32 words holding at
// least the rows' offsets.
func needMasks(op string, masks Buffer, rows int) error {
	if masks.Ptr == 0 {
		return nil
	}
	return need(op, "masks", masks, rows, I32)
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
