package prune

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quantize"
)

// SparseGPT (Frantar and Alistarh, 2023) prunes a linear layer's weight matrix W as GPTQ
// quantizes it: one input column at a time, and after each column the error of the weights
// it set to zero is spread over the columns not yet visited, in the proportions that least
// change the layer's outputs on the calibration inputs X (the optimal brain surgeon update
// with the Hessian H = 2 X^T X). With U the upper Cholesky factor of H^-1, zeroing weight
// w of column i leaves the error e = w / U[i][i], and each later column j of the row moves
// by -e U[i][j].
//
// Which weights to zero is chosen as the columns go, from the weights as they are then:
// unstructured, once per block of columns (the paper's adaptive mask selection), keeping in
// each row the block's weights of the largest w^2 / U[j][j]^2 (the OBS saliency); with an
// N:M pattern, at the first column of each group of M. Updates past the current block are
// applied lazily, a block at a time.

// Hessian is a layer input's Hessian made ready for SparseGPT: dampened and factored. The
// linear layers that read one input (q, k and v; gate and up) share it.
type Hessian struct {
	cols int
	dead []bool    // columns whose input is always 0: their weights are free and are zeroed
	u    []float64 // upper Cholesky factor of the dampened H^-1
}

// NewHessian computes H = 2/n X^T X of the stage input x, adds damp times its mean diagonal
// to its diagonal (0: 0.01) and factors its inverse.
func NewHessian(p *cpu.Pool, x *calibrate.Dense, damp float64) (*Hessian, error) {
	if damp <= 0 {
		damp = 0.01
	}
	h, err := quantize.Hessian(p, x)
	if err != nil {
		return nil, err
	}
	n := x.Cols
	hs := &Hessian{cols: n, dead: make([]bool, n)}
	var mean float64
	for i := range n {
		if h[i*n+i] == 0 {
			h[i*n+i] = 1
			hs.dead[i] = true
		}
		mean += h[i*n+i]
	}
	mean /= float64(n)
	for i := range n {
		h[i*n+i] += damp * mean
	}
	if hs.u, err = quantize.InverseCholeskyUpper(h, n); err != nil {
		return nil, fmt.Errorf("sparsegpt: %w", err)
	}
	return hs, nil
}

// SparseGPT prunes w in place to the sparsity (or the pattern, when it is set) with h, the
// prepared Hessian of its inputs, blockSize columns per lazy update (rounded up to a
// multiple of the pattern's M; 0: 128). Rows are independent and run on p's threads.
func SparseGPT(p *cpu.Pool, w *calibrate.Dense, h *Hessian, sparsity float64, pat Pattern, blockSize int) error {
	rows, cols := w.Rows, w.Cols
	if cols != h.cols {
		return fmt.Errorf("sparsegpt: %s: %d columns, Hessian of %d", w.Name, cols, h.cols)
	}
	if blockSize <= 0 {
		blockSize = 128
	}
	if !pat.IsZero() {
		if cols%pat.M != 0 {
			return fmt.Errorf("sparsegpt: %s: %d columns are not a multiple of the pattern's %d", w.Name, cols, pat.M)
		}
		blockSize = (blockSize + pat.M - 1) / pat.M * pat.M
	}
	U := h.u
	p.Run(rows, func(start, end int) {
		W := make([]float64, cols)
		keep := make([]bool, cols)
		score := make([]float64, cols)
		errs := make([]float64, blockSize)
		for r := start; r < end; r++ {
			row := w.Row(r)
			for j, v := range row {
				if !h.dead[j] {
					W[j] = float64(v)
				} else {
					W[j] = 0
				}
			}
			for i1 := 0; i1 < cols; i1 += blockSize {
				i2 := min(i1+blockSize, cols)
				if pat.IsZero() {
					saliency(W, U, cols, i1, i2, score)
					keepTopRow(score[i1:i2], keepCount(i2-i1, sparsity), keep[i1:i2])
				}
				for i := i1; i < i2; i++ {
					if !pat.IsZero() && i%pat.M == 0 {
						saliency(W, U, cols, i, i+pat.M, score)
						keepTopRow(score[i:i+pat.M], pat.N, keep[i:i+pat.M])
					}
					var e float64
					if !keep[i] || h.dead[i] {
						e = W[i] / U[i*cols+i]
						W[i] = 0
					}
					errs[i-i1] = e
					if e == 0 {
						continue
					}
					u := U[i*cols:]
					for j := i + 1; j < i2; j++ {
						W[j] -= e * u[j]
					}
				}
				// Lazy update of the columns after the block.
				for i := i1; i < i2; i++ {
					e := errs[i-i1]
					if e == 0 {
						continue
					}
					u := U[i*cols:]
					for j := i2; j < cols; j++ {
						W[j] -= e * u[j]
					}
				}
			}
			for j := range row {
				row[j] = float32(W[j])
			}
		}
	})
	return nil
}

// saliency sets score[j] = W[j]^2 / U[j][j]^2 for j in [from, to): the loss increase of
// zeroing W[j] alone.
func saliency(W, U []float64, cols, from, to int, score []float64) {
	for j := from; j < to; j++ {
		d := U[j*cols+j]
		score[j] = W[j] * W[j] / (d * d)
	}
}
