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
var quantizedTypes = []DType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K}

// GEMVQWarps is the warps of a gemvq block (the W of the GEMVQ_ONE lines in gemvq.cu),
// which share its GEMVQRows weight rows (the R there).
const (
	GEMVQWarps = 4
	GEMVQRows  = 4
)

// gemvqKernel returns the gemvq_* kernel for n (1..GEMVMaxRows) token rows of a weight of
// block type dt (float32 x; the _x8 and _m suffixes name its int8 and multi-weight twins).
func gemvqKernel(n int, dt DType) string {
	return "gemvq_" + gemvBucket(n) + "_" + suffix(dt)
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

// GEMVLayout names one of the quantized GEMV's kernels (kernels/gemvq.cu), both in the
// split layout (a block's 4 warps share its 4 weight rows, each taking a quarter of every
// row's units).
type GEMVLayout int

const (
	// GEMVSplit multiplies the dequantized weights with float32 x.
	GEMVSplit GEMVLayout = iota
	// GEMVSplitX8 rounds each lane's 16 values of x to 8 bits in registers (quantize_x8)
	// and multiplies with the weights' quants on __dp4a.
	GEMVSplitX8
)

// ParseGEMVLayout reads a layout's name: split or split8.
func ParseGEMVLayout(s string) (GEMVLayout, error) {
	for l, name := range gemvLayoutNames {
		if s == name {
			return GEMVLayout(l), nil
		}
	}
	return 0, fmt.Errorf("cuda: unknown quantized GEMV layout %q (split, split8)", s)
}

var gemvLayoutNames = []string{"split", "split8"}

func (l GEMVLayout) String() string { return gemvLayoutNames[l] }

// Int8 reports whether the layout rounds x to 8 bits (its results differ from the float32
// layout's by that rounding, about 1e-3 relative).
func (l GEMVLayout) Int8() bool { return l == GEMVSplitX8 }

// GEMVQ computes y = x · wᵀ for n (1..GEMVMaxRows) rows of float32 x ([n][k]) and a
// quantized weight w ([m][k] of a block type, k a whole number of blocks) into float32 y
// ([n][m]), dequantizing w in registers (the GEMVSplit layout).
func (o *Ops) GEMVQ(y, x, w Buffer, n, k, m int) error {
	return o.GEMVQWith(GEMVSplit, y, x, w, n, k, m)
}

// GEMVQWith is GEMVQ in the given kernel layout.
func (o *Ops) GEMVQWith(l GEMVLayout, y, x, w Buffer, n, k, m int) error {
	if err := gemvShape("gemvq", n, k); err != nil {
		return err
	}
	if err := quantShape("gemvq", w.DType, k); err != nil {
		return err
	}
	if err := firstErr(need("gemvq", "y", y, n*m, F32), need("gemvq", "x", x, n*k, F32), need("gemvq", "w", w, m*k, quantizedTypes...)); err != nil {
		return err
	}
	name := gemvqKernel(n, w.DType)
	if l == GEMVSplitX8 {
		name += "_x8"
	}
	return o.Dev.Launch(o.Kern.mod, name, Dim3{(m + GEMVQRows - 1) / GEMVQRows, 1, 1}, Dim3{32 * GEMVQWarps, 1, 1}, 0,
		y, x, w, n, k, m)
}

// GEMVQMulti computes y[j] = x · w[j]ᵀ for up to GEMVMulti quantized weights of one block
// type (w[j] [m[j]][k]) in one launch of the GEMVSplit layout, a grid over their
// concatenated rows, for n (1..GEMVMaxRows) rows of float32 x: a layer's q, k and v, or
// its gate and up, without a launch (and a grid's tail) each. An unused slot has m[j] = 0
// and repeats a valid pair of buffers. The results equal GEMVQ's weight by weight, bit
// for bit.
func (o *Ops) GEMVQMulti(y [GEMVMulti]Buffer, x Buffer, w [GEMVMulti]Buffer, n, k int, m [GEMVMulti]int) error {
	if err := gemvShape("gemvq multi", n, k); err != nil {
		return err
	}
	if err := quantShape("gemvq multi", w[0].DType, k); err != nil {
		return err
	}
	if err := need("gemvq multi", "x", x, n*k, F32); err != nil {
		return err
	}
	blocks := 0
	for j := range GEMVMulti {
		if err := firstErr(need("gemvq multi", "y", y[j], n*m[j], F32), need("gemvq multi", "w", w[j], m[j]*k, w[0].DType)); err != nil {
			return err
		}
		blocks += (m[j] + GEMVQRows - 1) / GEMVQRows
	}
	return o.Dev.Launch(o.Kern.mod, gemvqKernel(n, w[0].DType)+"_m", Dim3{blocks, 1, 1}, Dim3{32 * GEMVQWarps, 1, 1}, 0,
		y[0], y[1], y[2], x, w[0], w[1], w[2], n, k, m[0], m[1], m[2])
}

// QuantizeX8 quantizes count float32 values of x (a multiple of 16) as the GEMVSplitX8
// kernels do: signed bytes, four to a word of x8 (I32, count/4 words), and a scale a 16 values in d
// (F32, count/16). The GEMV does this inside its blocks; this kernel lets tests check it.
func (o *Ops) QuantizeX8(x8, d, x Buffer, count int) error {
	if count <= 0 || count%16 != 0 {
		return fmt.Errorf("cuda quantize x8: %d values is not a positive multiple of 16", count)
	}
	if err := firstErr(need("quantize x8", "x8", x8, count/4, I32), need("quantize x8", "d", d, count/16, F32), need("quantize x8", "x", x, count, F32)); err != nil {
		return err
	}
	units := count / 16
	return o.Dev.Launch(o.Kern.mod, "quantize_x8_rows", Dim3{gridFor(units), 1, 1}, Dim3{threads, 1, 1}, 0, x8, d, x, units)
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
