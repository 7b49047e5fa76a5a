package cpu

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Weight is a row-major matrix of Rows rows of Cols elements each, every row stored in
// Type's block format (Cols is a whole number of blocks). Data is usually a read-only slice
// of a memory-mapped model file: kernels read it in place and never copy or dequantize it
// whole.
type Weight struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
}

// MatMul computes out[t][r] = sum_c w[r][c] * x[t][c] for nTokens tokens: out is
// [nTokens][w.Rows], x is [nTokens][w.Cols] (both may be longer). Weights of type F32, F16,
// BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K are supported. For quantized weights the
// activations are quantized once per call (to Q8_0 for the 32-element block types, to Q8_K
// for the K-quants).
//
// Q8_0 and Q4_0 weights take one arithmetic whatever the token count (see matMulQ0):
// integer block dot products with the Q8_0 activations, scaled and summed in block order,
// 8 weight rows at a time for fewer than q0MinTokens tokens and in tiles of 4 rows x 16
// tokens from there on, so that a token's outputs are bit for bit the same alone or in a
// batch. For the other types, fewer than gemmMinTokens tokens (decode, small batches,
// speculative verify steps) run as matrix-vector products split over rows, 4 rows per
// kernel call where the type has such a kernel, Q4_1, Q5_0, Q5_1 and the K-quants dotted in integers with the
// quantized activations, as GGML does; from there on (prefill, large batches) the product
// runs as a GEMM (see matMulGEMM): each panel of 6 weight rows is widened to float32 once and
// meets all tokens in a register-blocked kernel; Q8_0 and Q8_K activations are dequantized
// back to float for it, so the products are those of the integer path, summed in float32.
func MatMul(p *Pool, out []float32, w Weight, x []float32, nTokens int) error {
	rb, err := w.check(len(x), len(out), nTokens)
	if err != nil {
		return err
	}
	k := p.kern
	xs := x[:nTokens*w.Cols]
	switch w.Type {
	case quant.Q8_0, quant.Q4_0:
		return matMulQ0(p, out, w, xs, nTokens)
	}
	if nTokens >= gemmMinTokens(w.Type) {
		return matMulGEMM(p, out, w, rb, xs, nTokens)
	}

	var dot func(w, x []byte, nb int) float32
	switch w.Type {
	case quant.F32, quant.F16, quant.BF16:
		matVecFloat(p, out, w, rb, xs, nTokens)
		return nil
	case quant.Q5_0:
		dot = k.dotQ5_0
	case quant.Q5_1:
		dot = k.dotQ5_1
	case quant.Q4_1:
		dot = k.dotQ4_1
	case quant.Q4_K:
		dot = k.dotQ4K
	case quant.Q5_K:
		dot = k.dotQ5K
	case quant.Q6_K:
		dot = k.dotQ6K
	}

	at := activationFormat(w.Type)
	xrb, err := at.RowBytes(w.Cols)
	if err != nil {
		return fmt.Errorf("cpu: matmul: activations: %w", err)
	}
	p.scratchMu.Lock()
	defer p.scratchMu.Unlock()
	p.scratch = grow(p.scratch, nTokens*xrb)
	xq := p.scratch
	quantizeActivations(p, at, xq, xs, nTokens, w.Cols)
	matVecQuant(p, out, w, rb, xq, xrb, nTokens, dot)
	return nil
}

// check validates the shapes of a MatMul and returns the bytes per weight row.
func (w Weight) check(nx, nout, nTokens int) (int, error) {
	switch w.Type {
	case quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K:
	default:
		return 0, fmt.Errorf("cpu: matmul: weight type %s not supported", w.Type)
	}
	if w.Rows <= 0 || w.Cols <= 0 || nTokens <= 0 {
		return 0, fmt.Errorf("cpu: matmul: bad shape %dx%d with %d tokens", w.Rows, w.Cols, nTokens)
	}
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return 0, fmt.Errorf("cpu: matmul: %w", err)
	}
	switch {
	case len(w.Data) < w.Rows*rb:
		return 0, fmt.Errorf("cpu: matmul: %s weight %dx%d needs %d bytes, has %d", w.Type, w.Rows, w.Cols, w.Rows*rb, len(w.Data))
	case nx < nTokens*w.Cols:
		return 0, fmt.Errorf("cpu: matmul: x has %d values, need %d tokens x %d", nx, nTokens, w.Cols)
	case nout < nTokens*w.Rows:
		return 0, fmt.Errorf("cpu: matmul: out has %d values, need %d tokens x %d", nout, nTokens, w.Rows)
	}
	return rb, nil
}

// quantizeActivations quantizes nTokens rows of cols values of x into dst in format t (Q8_0
// or Q8_K), in parallel over tokens.
func quantizeActivations(p *Pool, t quant.Type, dst []byte, x []float32, nTokens, cols int) {
	bs, bb := t.BlockSize(), t.BlockBytes()
	nb := cols / bs
	quantize := func(start, end int) {
		if t == quant.Q8_0 {
			p.kern.quantQ8_0(dst[start*bb:end*bb], x[start*bs:end*bs])
		} else {
			p.kern.quantQ8_K(dst[start*bb:end*bb], x[start*bs:end*bs])
		}
	}
	if nTokens == 1 {
		quantize(0, nb) // too little work to wake the pool for
		return
	}
	p.Run(nTokens*nb, quantize)
}

// matVecQuant computes the products of a few tokens with Q4_1, Q5_0, Q5_1 or K-quant weights
// (activations xq in Q8_0 or Q8_K, xrb bytes per token) one row at a time with dot; work is
// split over groups of 4 rows.
func matVecQuant(p *Pool, out []float32, w Weight, rb int, xq []byte, xrb, nTokens int, dot func(w, x []byte, nb int) float32) {
	rows := w.Rows
	nb := w.Cols / w.Type.BlockSize()
	p.Run((rows+3)/4, func(start, end int) {
		for i := 4 * start; i < min(4*end, rows); i++ {
			for t := range nTokens {
				out[t*rows+i] = dot(w.Data[i*rb:(i+1)*rb], xq[t*xrb:(t+1)*xrb], nb)
			}
		}
	})
}

// matVecFloat computes the products of a few tokens with F32, F16 or BF16 weights 4 rows at
// a time; work is split over groups of 4 rows.
func matVecFloat(p *Pool, out []float32, w Weight, rb int, xs []float32, nTokens int) {
	k := p.kern
	rows, cols := w.Rows, w.Cols
	gemv4, dot := k.gemv4F32, func(row []byte, x []float32) float32 { return k.dotF32(bytesAsF32(row), x) }
	switch w.Type {
	case quant.F16:
		gemv4, dot = k.gemv4F16, k.dotF16
	case quant.BF16:
		gemv4, dot = k.gemv4BF16, k.dotBF16
	}
	p.Run((rows+3)/4, func(start, end int) {
		for g := start; g < end; g++ {
			r := 4 * g
			for t := range nTokens {
				xt := xs[t*cols : (t+1)*cols]
				if r+4 <= rows {
					gemv4(w.Data[r*rb:], rb, xt, out[t*rows+r:])
					continue
				}
				for i := r; i < rows; i++ {
					out[t*rows+i] = dot(w.Data[i*rb:(i+1)*rb], xt)
				}
			}
		}
	})
}
