package cuda

import "fmt"

// The launchers of the FP8 weight kernels in kernels/gemvq_fp8.cu: E4M3 bytes (FP8, [m][k])
// with a float32 scale per row (F32, [m]).

// FP8MinMajor and FP8MinMinor are the compute capability FP8 weights need (8.9: Ada and
// Hopper, the first with FP8 tensor cores).
const (
	FP8MinMajor = 8
	FP8MinMinor = 9
)

// SupportsFP8 reports whether a device of this compute capability runs FP8 weights.
func (i DeviceInfo) SupportsFP8() bool {
	return i.Major > FP8MinMajor || (i.Major == FP8MinMajor && i.Minor >= FP8MinMinor)
}

// fp8Shape checks an FP8 weight of m rows of k values: k a positive multiple of 16 (the
// kernels read 16-byte units) and buffers w (FP8 [m][k]) and s (F32 [m]).
func fp8Shape(op string, w, s Buffer, k, m int) error {
	if k <= 0 || k%16 != 0 || m <= 0 {
		return fmt.Errorf("cuda %s: an FP8 weight of %d rows of %d values (rows must be a multiple of 16 values)", op, m, k)
	}
	return firstErr(need(op, "w", w, m*k, FP8), need(op, "scales", s, m, F32))
}

// GEMVFP8 computes y = x · wᵀ for n (1..GEMVMaxRows) rows of float32 x ([n][k]) and an FP8
// weight (w FP8 [m][k], s its F32 scales [m]) into float32 y ([n][m]), the E4M3 bytes
// dequantized in registers and each row's sum scaled once.
func (o *Ops) GEMVFP8(y, x, w, s Buffer, n, k, m int) error {
	if err := gemvShape("gemv fp8", n, k); err != nil {
		return err
	}
	if err := fp8Shape("gemv fp8", w, s, k, m); err != nil {
		return err
	}
	if err := firstErr(need("gemv fp8", "y", y, n*m, F32), need("gemv fp8", "x", x, n*k, F32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "gemv_fp8_"+gemvBucket(n), Dim3{(m + GEMVQRows - 1) / GEMVQRows, 1, 1}, Dim3{32 * GEMVQWarps, 1, 1}, 0,
		y, x, w, s, n, k, m)
}

// DequantizeFP8BF16 writes the first rows rows of an FP8 weight (w FP8, s F32 scales, rows
// of k values) into out as BF16 ([rows][k]), for cuBLAS.
func (o *Ops) DequantizeFP8BF16(out, w, s Buffer, rows, k int) error {
	if err := fp8Shape("dequantize fp8", w, s, k, rows); err != nil {
		return err
	}
	if err := need("dequantize fp8", "out", out, rows*k, BF16); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "dequant_bf16_fp8", Dim3{gridFor(rows * k / 16), 1, 1}, Dim3{threads, 1, 1}, 0,
		out, w, s, rows, k)
}
