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
// BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and FP8 are supported (FP8 rows are
// widened to float32 and meet float32 activations, in matVecFP8 or the GEMM). For quantized weights the
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
	if nTokens >= gemmMinTokens(k, w.Type) {
		return matMulGEMM(p, out, w, rb, xs, nTokens)
	}
	if w.Type == quant.FP8 {
		matVecFP8(p, out, w, rb, xs, nTokens)
		return nil
	}

	var dot func(w, x []byte, nb int) float32
	switch w.Type {
	case quant.F32, quant.F16, quant.BF16:
		p.scratchMu.Lock()
		defer p.scratchMu.Unlock()
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
	case quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.FP8:
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
	quantize := p.kern.quantQ8_K
	if t == quant.Q8_0 {
		quantize = p.kern.quantQ8_0
	}
	if nTokens == 1 {
		quantize(dst, x[:cols]) // too little work to wake the pool for
		return
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	p.Run(nTokens*cols/bs, func(start, end int) { quantize(dst[start*bb:end*bb], x[start*bs:end*bs]) })
}

// matVec is the few-token product in progress on a Pool (matVecQuant, matVecFloat), with
// its loops bound once so that a product allocates nothing; Pool.scratchMu guards it.
type matVec struct {
	quantRun, floatRun func(start, end int) // s.quantGroups and s.floatGroups, bound once

	kern    *kernels
	out     []float32
	w       Weight
	rb      int
	nTokens int
	xq      []byte // quantized activations, xrb bytes a token
	xrb     int
	dot     func(w, x []byte, nb int) float32
	xs      []float32 // float activations
}

// matVecQuant computes the products of a few tokens with Q4_1, Q5_0, Q5_1 or K-quant weights
// (activations xq in Q8_0 or Q8_K, xrb bytes per token) one row at a time with dot; work is
// split over groups of 4 rows. The caller holds p.scratchMu.
func matVecQuant(p *Pool, out []float32, w Weight, rb int, xq []byte, xrb, nTokens int, dot func(w, x []byte, nb int) float32) {
	s := p.matVec()
	s.out, s.w, s.rb, s.nTokens, s.xq, s.xrb, s.dot = out, w, rb, nTokens, xq, xrb, dot
	p.Run((w.Rows+3)/4, s.quantRun)
	*s = matVec{quantRun: s.quantRun, floatRun: s.floatRun}
}

// quantGroups computes the outputs of row groups [start, end) of a matVecQuant product.
func (s *matVec) quantGroups(start, end int) {
	rows, rb, xrb := s.w.Rows, s.rb, s.xrb
	nb := s.w.Cols / s.w.Type.BlockSize()
	for i := 4 * start; i < min(4*end, rows); i++ {
		for t := range s.nTokens {
			s.out[t*rows+i] = s.dot(s.w.Data[i*rb:(i+1)*rb], s.xq[t*xrb:(t+1)*xrb], nb)
		}
	}
}

// matVecFloat computes the products of a few tokens with F32, F16 or BF16 weights 4 rows at
// a time; work is split over groups of 4 rows. The caller holds p.scratchMu.
func matVecFloat(p *Pool, out []float32, w Weight, rb int, xs []float32, nTokens int) {
	s := p.matVec()
	s.kern, s.out, s.w, s.rb, s.nTokens, s.xs = p.kern, out, w, rb, nTokens, xs
	p.Run((w.Rows+3)/4, s.floatRun)
	*s = matVec{quantRun: s.quantRun, floatRun: s.floatRun}
}

// floatGroups computes the outputs of row groups [start, end) of a matVecFloat product.
// Each group of 4 rows meets up to maxMultiTokens tokens per kernel call (gemv4F16Multi
// and its twins: in the avx512 and avx2 sets each weight read from memory once for all of them, each token's
// outputs bit for bit those of a call of its own), so that a speculative verify step of
// 1+k tokens reads the weights about as often as a decode step; more tokens meet the
// group, still in cache, in calls of multiRows4Tokens.
func (s *matVec) floatGroups(start, end int) {
	k, rows, cols, rb := s.kern, s.w.Rows, s.w.Cols, s.rb
	gemv4, multi := k.gemv4F32, k.gemv4F32Multi
	switch s.w.Type {
	case quant.F16:
		gemv4, multi = k.gemv4F16, k.gemv4F16Multi
	case quant.BF16:
		gemv4, multi = k.gemv4BF16, k.gemv4BF16Multi
	}
	// Up to maxMultiTokens tokens take one call; more go in calls of at most
	// multiRows4Tokens, whose kernels serve 4 rows, so that every token's activations are
	// read once for the 4 rows.
	chunk := s.nTokens
	if chunk > maxMultiTokens {
		chunk = multiRows4Tokens
	}
	for g := start; g < end; g++ {
		r := 4 * g
		if r+4 <= rows {
			for t := 0; t < s.nTokens; t += chunk {
				if nt := min(s.nTokens-t, chunk); nt > 1 {
					multi(s.w.Data[r*rb:], rb, s.xs[t*cols:], cols, cols, nt, s.out[t*rows+r:], rows)
				} else {
					gemv4(s.w.Data[r*rb:], rb, s.xs[t*cols:(t+1)*cols], s.out[t*rows+r:])
				}
			}
			continue
		}
		for t := 0; t < s.nTokens; t++ {
			xt := s.xs[t*cols : (t+1)*cols]
			for i := r; i < rows; i++ {
				row := s.w.Data[i*rb : (i+1)*rb]
				var v float32
				switch s.w.Type {
				case quant.F16:
					v = k.dotF16(row, xt)
				case quant.BF16:
					v = k.dotBF16(row, xt)
				default:
					v = k.dotF32(bytesAsF32(row), xt)
				}
				s.out[t*rows+i] = v
			}
		}
	}
}

// matVec returns the pool's few-token product state, its loops bound on first use.
func (p *Pool) matVec() *matVec {
	s := &p.mv
	if s.quantRun == nil {
		s.quantRun, s.floatRun = s.quantGroups, s.floatGroups
	}
	return s
}
