package cpu

import "github.com/kvasir-llm/kvasir/internal/quant"

// dequantFP8Generic widens an FP8 row through the 256-entry table of E4M3 values: each
// value is the row's scale times the byte's value, one float32 rounding, as
// quant.Dequantize computes it.
func dequantFP8Generic(dst []float32, src []byte) {
	s, t := quant.FP8RowScale(src), quant.E4M3Table()
	for i, b := range src[4 : 4+len(dst)] {
		dst[i] = s * t[b]
	}
}

// matVecFP8 computes the products of a few tokens with FP8 weights: each worker widens a
// weight row to float32 once (dequantFP8) and dots it with every token's activations, so
// a row's bytes are read once per call whatever the token count. The products are those of
// the GEMM path (the same widened rows, dotF32 against the same activations).
func matVecFP8(p *Pool, out []float32, w Weight, rb int, xs []float32, nTokens int) {
	k, rows, cols := p.kern, w.Rows, w.Cols
	p.Run(rows, func(start, end int) {
		row := make([]float32, cols)
		for r := start; r < end; r++ {
			k.dequantFP8(row, w.Data[r*rb:(r+1)*rb])
			for t := range nTokens {
				out[t*rows+r] = k.dotF32(row, xs[t*cols:(t+1)*cols])
			}
		}
	})
}
