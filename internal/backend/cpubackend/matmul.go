package cpubackend

import (
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// kernelTypes are the weight types cpu.MatMul multiplies in their block format.
var kernelTypes = map[quant.Type]bool{
	quant.F32: true, quant.F16: true, quant.BF16: true, quant.Q8_0: true,
	quant.Q4_0: true, quant.Q4_K: true, quant.Q6_K: true,
}

// matMul computes out = x·wᵀ for n rows of x. Weight types with kernels go to cpu.MatMul;
// the others (Q4_1, Q5_0, Q5_K, ...) take a plain-Go path that dequantizes one weight row
// at a time per worker, slower but correct.
func matMul(p *cpu.Pool, out []float32, w cpu.Weight, x []float32, n int) error {
	if kernelTypes[w.Type] {
		return cpu.MatMul(p, out, w, x, n)
	}
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return err
	}
	var firstErr error
	p.Run(w.Rows, func(start, end int) {
		row := make([]float32, w.Cols)
		for r := start; r < end; r++ {
			if err := quant.Dequantize(w.Type, w.Data[r*rb:(r+1)*rb], row); err != nil {
				firstErr = err // every worker fails the same way; any one error will do
				return
			}
			for t := range n {
				xt := x[t*w.Cols : (t+1)*w.Cols]
				var s float32
				for i, v := range row {
					s += v * xt[i]
				}
				out[t*w.Rows+r] = s
			}
		}
	})
	return firstErr
}
