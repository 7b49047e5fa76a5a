package cpu

import (
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Blocking of the many-token path (see matMulGEMM).
const (
	// gemmKC is the k-chunk: the float panel of 4 weight rows (8 KiB) stays in L1 while it
	// meets every token, and all tokens' activations for one chunk (nTokens x 2 KiB) stay in
	// L2 while the row blocks of a work unit go by.
	gemmKC = 512
	// gemmMinTokens is the least token count that takes the GEMM path; fewer tokens run as
	// dot products straight off the weights.
	gemmMinTokens = 3
)

// matMulGEMM computes out[t][r] = sum_c w[r][c] * xf[t][c] for nTokens >= gemmMinTokens
// float activations xf ([nTokens][w.Cols]). Work is split over blocks of 4 weight rows.
// For each k-chunk a block's rows are widened to a float32 panel once (F32 rows are used in
// place; F16/BF16 are converted and quantized rows dequantized, one panel of 4 x gemmKC at a
// time, never the whole matrix) and the register-blocked gemm4x3 kernel runs the panel
// against 3 tokens at a time.
func matMulGEMM(p *Pool, out []float32, w Weight, rb int, xf []float32, nTokens int) {
	k := p.kern
	rows, cols := w.Rows, w.Cols
	bs, bb := w.Type.BlockSize(), w.Type.BlockBytes()
	nBlocks := (rows + 3) / 4
	p.Run(nBlocks, func(start, end int) {
		var panel []float32
		if w.Type != quant.F32 {
			panel = make([]float32, 4*min(gemmKC, cols))
		}
		r0, r1 := 4*start, min(4*end, rows)
		for t := range nTokens {
			clear(out[t*rows+r0 : t*rows+r1])
		}
		for k0 := 0; k0 < cols; k0 += gemmKC {
			kn := min(gemmKC, cols-k0)
			for b := start; b < end; b++ {
				r := 4 * b
				nr := min(4, rows-r)
				var pw []float32
				ldw := kn
				if w.Type == quant.F32 {
					pw, ldw = bytesAsF32(w.Data[r*rb:])[k0:], cols
				} else {
					pw = panel[:nr*kn]
					for i := range nr {
						dst := pw[i*kn : (i+1)*kn]
						src := w.Data[(r+i)*rb+(k0/bs)*bb:][:(kn/bs)*bb]
						switch w.Type {
						case quant.F16:
							k.cvtF16(dst, src)
						case quant.BF16:
							k.cvtBF16(dst, src)
						case quant.Q8_0:
							k.dequantQ8_0(dst, src)
						case quant.Q4_0:
							k.dequantQ4_0(dst, src)
						case quant.Q4_K:
							k.dequantQ4K(dst, src)
						case quant.Q6_K:
							k.dequantQ6K(dst, src)
						}
					}
				}
				t := 0
				if nr == 4 {
					for ; t+3 <= nTokens; t += 3 {
						k.gemm4x3(pw, ldw, xf[t*cols+k0:], cols, kn, out[t*rows+r:], rows)
					}
				}
				for ; t < nTokens; t++ {
					xt := xf[t*cols+k0:][:kn]
					for i := range nr {
						out[t*rows+r+i] += k.dotF32(pw[i*ldw:][:kn], xt)
					}
				}
			}
		}
	})
}
