package cpubackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// kernelTypes are the weight types cpu.MatMul multiplies in their block format.
var kernelTypes = map[quant.Type]bool{
	quant.F32: true, quant.F16: true, quant.BF16: true, quant.Q8_0: true,
	quant.Q4_0: true, quant.Q4_1: true, quant.Q5_0: true, quant.Q5_1: true, quant.Q4_K: true, quant.Q5_K: true, quant.Q6_K: true,
	quant.FP8: true,
}

// matMul computes out = x·wᵀ for n rows of x. Weight types with kernels go to cpu.MatMul;
// the others (Q2_K, Q3_K, the IQ types, ...) take a plain-Go path that dequantizes one weight row
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

// matMulOperands checks the operands of out = x · wᵀ and returns them.
func matMulOperands(op string, out, x, w backend.Tensor) (*tensor, *tensor, cpu.Weight, error) {
	o, err := activation(op, "out", out)
	if err != nil {
		return nil, nil, cpu.Weight{}, err
	}
	xs, err := activation(op, "x", x)
	if err != nil {
		return nil, nil, cpu.Weight{}, err
	}
	wm, err := matrix(op, "w", w)
	if err != nil {
		return nil, nil, cpu.Weight{}, err
	}
	if xs.cols() != wm.Cols || o.cols() != wm.Rows || o.rows() != xs.rows() {
		return nil, nil, cpu.Weight{}, fmt.Errorf("cpu %s: out %v = x %v · w [%d %d]ᵀ", op, o.shape, xs.shape, wm.Rows, wm.Cols)
	}
	return o, xs, wm, nil
}

// MatMul computes out = x · wᵀ.
func (b *Backend) MatMul(out, x, w backend.Tensor) error {
	o, xs, wm, err := matMulOperands("matmul", out, x, w)
	if err != nil {
		return err
	}
	return matMul(b.pool, o.f32, wm, xs.f32, xs.rows())
}

// MatMuls computes outs[i] = x · ws[i]ᵀ: weights with kernels in one cpu.MatMuls call
// (one parallel loop for Q8_0 or Q4_0 weights of one type), the others one by one.
func (b *Backend) MatMuls(outs []backend.Tensor, x backend.Tensor, ws []backend.Tensor) error {
	if len(outs) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("cpu matmuls: %d outputs for %d weights", len(outs), len(ws))
	}
	var xs *tensor
	dsts, wms := b.mmOuts[:0], b.mmWeights[:0]
	kernels := true
	for i := range ws {
		o, x1, wm, err := matMulOperands("matmuls", outs[i], x, ws[i])
		if err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
		xs, dsts, wms = x1, append(dsts, o.f32), append(wms, wm)
		kernels = kernels && kernelTypes[wm.Type]
	}
	b.mmOuts, b.mmWeights = dsts, wms
	if kernels {
		return cpu.MatMuls(b.pool, dsts, wms, xs.f32, xs.rows())
	}
	for i, wm := range wms {
		if err := matMul(b.pool, dsts[i], wm, xs.f32, xs.rows()); err != nil {
			return err
		}
	}
	return nil
}

// MatMulSwiGLU computes out = silu(x · gateᵀ) * (x · upᵀ): in one cpu.MatMulSwiGLU call
// for weights with kernels, else as two products (up's into a scratch buffer) and SwiGLU.
func (b *Backend) MatMulSwiGLU(out, x, gate, up backend.Tensor) error {
	o, xs, gw, err := matMulOperands("matmul swiglu", out, x, gate)
	if err != nil {
		return err
	}
	_, _, uw, err := matMulOperands("matmul swiglu", out, x, up)
	if err != nil {
		return err
	}
	n := xs.rows()
	if kernelTypes[gw.Type] && kernelTypes[uw.Type] {
		return cpu.MatMulSwiGLU(b.pool, o.f32, gw, uw, xs.f32, n)
	}
	b.upScratch = grow(b.upScratch, len(o.f32))
	if err := matMul(b.pool, o.f32, gw, xs.f32, n); err != nil {
		return err
	}
	if err := matMul(b.pool, b.upScratch, uw, xs.f32, n); err != nil {
		return err
	}
	return cpu.SwiGLU(b.pool, o.f32, o.f32, b.upScratch)
}
