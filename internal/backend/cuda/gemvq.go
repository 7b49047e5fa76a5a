package cuda

import "fmt"

// The launchers of the kernels in kernels/gemvq.cu: weights kept in GGML's block layouts
// and dequantized where they are used.

// Quantized reports whether t is one of the GGML block types the kernels read.
func Quantized(t DType) bool {
	_, _, ok := t.Block()
	return ok
}

// quantizedTypes lists the block types, for the operand checks.
var quantizedTypes = []DType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K}

// GEMVQWarps is the warps of a gemvq block (GEMVQ_WARPS in gemvq.cu).
const GEMVQWarps = 4

// gemvqKernel returns the gemvq_* kernel for n (1..GEMVMaxRows) token rows of a weight of
// block type dt and the weight rows one block of it computes (GEMVQWarps times the 4 rows
// a warp of its GEMVQ_ONE line in gemvq.cu).
func gemvqKernel(n int, dt DType) (name string, rows int) {
	return "gemvq_" + gemvBucket(n) + "_" + suffix(dt), GEMVQWarps * 4
}

// quantShape checks that rows of k values are whole blocks of dt.
func quantShape(op string, dt DType, k int) error {
	e, _, ok := dt.Block()
	if !ok {
		return fmt.Errorf("cuda %s: %s is not a block type", op, dt)
	}
	if k <= 0 || k%e != 0 {
		return fmt.Errorf("cuda %s: rows of %d values are not whole %s blocks of %d", op, k, dt, e)
	}
	return nil
}

// GEMVQ computes y = x · wᵀ for n (1..GEMVMaxRows) rows of float32 x ([n][k]) and a
// quantized weight w ([m][k] of a block type, k a whole number of blocks) into float32 y
// ([n][m]), dequantizing w in registers.
func (o *Ops) GEMVQ(y, x, w Buffer, n, k, m int) error {
	if err := gemvShape("gemvq", n, k); err != nil {
		return err
	}
	if err := quantShape("gemvq", w.DType, k); err != nil {
		return err
	}
	if err := firstErr(need("gemvq", "y", y, n*m, F32), need("gemvq", "x", x, n*k, F32), need("gemvq", "w", w, m*k, quantizedTypes...)); err != nil {
		return err
	}
	name, rows := gemvqKernel(n, w.DType)
	return o.Dev.Launch(o.Kern.mod, name, Dim3{(m + rows - 1) / rows, 1, 1}, Dim3{32 * GEMVQWarps, 1, 1}, 0,
		y, x, w, n, k, m)
}

// DequantizeBF16 writes the first rows rows of quantized weight w (rows of k values) into
// out as BF16 ([rows][k]), for cuBLAS.
func (o *Ops) DequantizeBF16(out, w Buffer, rows, k int) error {
	if rows <= 0 {
		return fmt.Errorf("cuda dequantize: %d rows", rows)
	}
	if err := quantShape("dequantize", w.DType, k); err != nil {
		return err
	}
	if err := firstErr(need("dequantize", "out", out, rows*k, BF16), need("dequantize", "w", w, rows*k, quantizedTypes...)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "dequant_bf16_"+suffix(w.DType), Dim3{gridFor(rows * k / 16), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, w, rows, k)
}
