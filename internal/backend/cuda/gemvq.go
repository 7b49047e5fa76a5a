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
var quantizedTypes = []DType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, Q8_0R, Q6_KR}

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
	// GEMVSplitX8 rounds x to 8 bits a value with a scale a 16 (quantize_x8_rows, once a
	// launch, into Ops.X8) and multiplies with the weights' quants on __dp4a.
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

// X8Scratch holds x rounded to 8 bits for the GEMVSplitX8 layout: Q the bytes (I32 words
// of four) and D the scales (F32, one a 16 values). Ops.AllocX8 reserves it.
type X8Scratch struct{ Q, D Buffer }

// Holds reports whether the scratch takes the rounding of count values.
func (s X8Scratch) Holds(count int) bool { return s.Q.Len*4 >= count }

// AllocX8 reserves o.X8 for GEMVs of up to values values of x (token rows times k, a
// multiple of 16), freeing a smaller one. It allocates, so it must not run inside a graph
// capture: the backend calls it when it opens.
func (o *Ops) AllocX8(values int) error {
	if values <= 0 || values%16 != 0 {
		return fmt.Errorf("cuda x8 scratch: %d values is not a positive multiple of 16", values)
	}
	if o.X8.Holds(values) {
		return nil
	}
	if err := o.FreeX8(); err != nil {
		return err
	}
	q, err := o.Dev.Alloc(I32, values/4)
	if err != nil {
		return fmt.Errorf("cuda x8 scratch: %w", err)
	}
	d, err := o.Dev.Alloc(F32, values/16)
	if err != nil {
		o.Dev.Free(q)
		return fmt.Errorf("cuda x8 scratch: %w", err)
	}
	o.X8, o.x8Of = X8Scratch{Q: q, D: d}, x8Copy{}
	return nil
}

// FreeX8 frees o.X8.
func (o *Ops) FreeX8() error {
	err := firstErr(o.Dev.Free(o.X8.Q), o.Dev.Free(o.X8.D))
	o.X8, o.x8Of = X8Scratch{}, x8Copy{}
	return err
}

// roundX8 rounds count values of x into o.X8 for an int8 GEMV, unless the op that wrote x
// left its rounding there and nothing was queued since (RMSNormX8, SwiGLUX8). The callers
// fall back to the float layout when o.X8 cannot hold them (an unreserved scratch, or a
// wider weight).
func (o *Ops) roundX8(x Buffer, count int) error {
	if c := o.x8Of; c.src == x.Ptr && c.count == count && c.seq == o.Dev.Seq() {
		return nil
	}
	return o.QuantizeX8(o.X8.Q, o.X8.D, x, count)
}

// GEMVQWith is GEMVQ in the given kernel layout (the int8 one only where o.X8 holds the
// n*k values of x; else the float layout).
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
	grid, block := Dim3{(m + GEMVQRows - 1) / GEMVQRows, 1, 1}, Dim3{32 * GEMVQWarps, 1, 1}
	if l == GEMVSplitX8 && o.X8.Holds(n*k) {
		if err := o.roundX8(x, n*k); err != nil {
			return err
		}
		if err := o.Dev.Launch(o.Kern.mod, gemvqKernel(n, w.DType)+"_x8", grid, block, 0, y, o.X8.Q, o.X8.D, w, n, k, m); err != nil {
			return err
		}
		o.keepX8(x, n*k, y)
		return nil
	}
	return o.Dev.Launch(o.Kern.mod, gemvqKernel(n, w.DType), grid, block, 0, y, x, w, n, k, m)
}

// GEMVQMulti computes y[j] = x · w[j]ᵀ for up to GEMVMulti quantized weights of one block
// type (w[j] [m[j]][k]) in one launch of the GEMVSplit layout, a grid over their
// concatenated rows, for n (1..GEMVMaxRows) rows of float32 x: a layer's q, k and v, or
// its gate and up, without a launch (and a grid's tail) each. An unused slot has m[j] = 0
// and repeats a valid pair of buffers. The results equal GEMVQ's weight by weight, bit
// for bit.
func (o *Ops) GEMVQMulti(y [GEMVMulti]Buffer, x Buffer, w [GEMVMulti]Buffer, n, k int, m [GEMVMulti]int) error {
	return o.GEMVQMultiWith(GEMVSplit, y, x, w, n, k, m)
}

// GEMVQMultiWith is GEMVQMulti in the given kernel layout (GEMVQWith's results, weight by
// weight, bit for bit; the int8 layout rounds x once for all the weights).
func (o *Ops) GEMVQMultiWith(l GEMVLayout, y [GEMVMulti]Buffer, x Buffer, w [GEMVMulti]Buffer, n, k int, m [GEMVMulti]int) error {
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
	name, x8, xd := gemvqKernel(n, w[0].DType)+"_m", x, x
	int8 := l == GEMVSplitX8 && o.X8.Holds(n*k)
	if int8 {
		if err := o.roundX8(x, n*k); err != nil {
			return err
		}
		name, x8, xd = name+"x8", o.X8.Q, o.X8.D
	}
	if err := o.Dev.Launch(o.Kern.mod, name, Dim3{blocks, 1, 1}, Dim3{32 * GEMVQWarps, 1, 1}, 0,
		y[0], y[1], y[2], x, x8, xd, w[0], w[1], w[2], n, k, m[0], m[1], m[2]); err != nil {
		return err
	}
	if int8 {
		o.keepX8(x, n*k, y[:]...)
	}
	return nil
}

// keepX8 records, after an int8 GEMV of count values of x, that o.X8 still holds their
// rounding: the GEMV only read x and o.X8 and wrote ys, so a GEMV of the same x queued
// next (the v projection after q and k of another block type, say) need not round it
// again. Nothing is recorded when a y overlaps x.
func (o *Ops) keepX8(x Buffer, count int, ys ...Buffer) {
	xEnd := x.Ptr + uint64(4*count)
	for _, y := range ys {
		if y.Len > 0 && y.Ptr < xEnd && x.Ptr < y.Ptr+uint64(y.Bytes()) {
			return
		}
	}
	o.markX8(x, count)
}

// markX8 records that o.X8 now holds the rounding of count values at x, as of the work
// queued so far.
func (o *Ops) markX8(x Buffer, count int) {
	o.x8Of = x8Copy{src: x.Ptr, count: count, seq: o.Dev.Seq()}
}

// QuantizeX8 quantizes count float32 values of x (a multiple of 16) as the GEMVSplitX8
// kernels do: signed bytes, four to a word of x8 (I32, count/4 words), and a scale a 16 values in d
// (F32, count/16): the GEMVSplitX8 layout's rounding before its GEMV.
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
