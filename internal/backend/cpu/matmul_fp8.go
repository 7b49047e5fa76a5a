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

// gemv4FP8Generic is the scalar gemv4FP8: each row's bytes through the table times x,
// summed in float32, then times the row's scale.
func gemv4FP8Generic(w []byte, stride int, x, out []float32) {
	t := quant.E4M3Table()
	for i := range out[:4] {
		row := w[i*stride : i*stride+4+len(x)]
		var s float32
		for j, b := range row[4:] {
			s += t[b] * x[j]
		}
		out[i] = quant.FP8RowScale(row) * s
	}
}

// matVecFP8 computes the products of a few tokens with FP8 weights, split over groups of 4
// rows: each group's bytes meet a token's activations in gemv4FP8 (decoded in registers,
// scaled once a row), the last rows past a multiple of 4 one at a time, widened
// (dequantFP8) and dotted.
func matVecFP8(p *Pool, out []float32, w Weight, rb int, xs []float32, nTokens int) {
	k, rows, cols := p.kern, w.Rows, w.Cols
	p.Run((rows+3)/4, func(start, end int) {
		var row []float32
		for g := start; g < end; g++ {
			r := 4 * g
			for t := range nTokens {
				xt := xs[t*cols : (t+1)*cols]
				if r+4 <= rows {
					k.gemv4FP8(w.Data[r*rb:], rb, xt, out[t*rows+r:])
					continue
				}
				if row == nil {
					row = make([]float32, cols)
				}
				for i := r; i < rows; i++ {
					k.dequantFP8(row, w.Data[i*rb:(i+1)*rb])
					out[t*rows+i] = k.dotF32(row, xt)
				}
			}
		}
	})
}
