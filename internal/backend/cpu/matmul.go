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

// Tile sizes of the many-token path: a tile of weight rows of about tileWeightBytes stays in
// L1/L2 while the activations of tileActBytes worth of tokens stream past it from L2.
const (
	tileWeightBytes = 32 << 10
	tileActBytes    = 192 << 10
	maxTileRows     = 64
)

// MatMul computes out[t][r] = sum_c w[r][c] * x[t][c] for nTokens tokens: out is
// [nTokens][w.Rows], x is [nTokens][w.Cols] (both may be longer). Weights of type F32, F16,
// BF16, Q8_0, Q4_0, Q4_K and Q6_K are supported. For quantized weights the activations are
// quantized once per call (to Q8_0 for Q8_0/Q4_0, to Q8_K for Q4_K/Q6_K) and dotted in
// integers, as GGML does. One token runs as a matrix-vector product split over rows; more
// tokens run tile by tile so that each weight tile is read from memory once per call.
func MatMul(p *Pool, out []float32, w Weight, x []float32, nTokens int) error {
	rb, err := w.check(len(x), len(out), nTokens)
	if err != nil {
		return err
	}
	k := p.kern
	xs := x[:nTokens*w.Cols]

	var (
		actType quant.Type
		dot     func(w, x []byte, nb int) float32
	)
	switch w.Type {
	case quant.F32, quant.F16, quant.BF16:
		p.Run(w.tiles(rb, 4*w.Cols, nTokens), func(start, end int) {
			w.runTiles(start, end, rb, 4*w.Cols, nTokens, out, func(row []byte, t int) float32 {
				xt := xs[t*w.Cols : (t+1)*w.Cols]
				switch w.Type {
				case quant.F16:
					return k.dotF16(row, xt)
				case quant.BF16:
					return k.dotBF16(row, xt)
				}
				return k.dotF32(bytesAsF32(row), xt)
			})
		})
		return nil
	case quant.Q8_0:
		actType, dot = quant.Q8_0, k.dotQ8_0
	case quant.Q4_0:
		actType, dot = quant.Q8_0, k.dotQ4_0
	case quant.Q4_K:
		actType, dot = quant.Q8_K, k.dotQ4K
	case quant.Q6_K:
		actType, dot = quant.Q8_K, k.dotQ6K
	}

	xrb, err := actType.RowBytes(w.Cols)
	if err != nil {
		return fmt.Errorf("cpu: matmul: activations: %w", err)
	}
	p.scratchMu.Lock()
	defer p.scratchMu.Unlock()
	if cap(p.scratch) < nTokens*xrb {
		p.scratch = make([]byte, nTokens*xrb)
	}
	xq := p.scratch[:nTokens*xrb]
	quantizeActivations(p, actType, xq, xs, nTokens, w.Cols)

	nb := w.Cols / w.Type.BlockSize()
	p.Run(w.tiles(rb, xrb, nTokens), func(start, end int) {
		w.runTiles(start, end, rb, xrb, nTokens, out, func(row []byte, t int) float32 {
			return dot(row, xq[t*xrb:(t+1)*xrb], nb)
		})
	})
	return nil
}

// check validates the shapes of a MatMul and returns the bytes per weight row.
func (w Weight) check(nx, nout, nTokens int) (int, error) {
	switch w.Type {
	case quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K:
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

// tileRows returns how many weight rows one tile holds.
func tileRows(rb, nTokens int) int {
	if nTokens == 1 {
		return 1 // matrix-vector: every row is its own unit of work
	}
	return max(1, min(maxTileRows, tileWeightBytes/rb))
}

// tiles returns the number of row tiles of w.
func (w Weight) tiles(rb, xrb, nTokens int) int {
	tr := tileRows(rb, nTokens)
	return (w.Rows + tr - 1) / tr
}

// runTiles computes the outputs of row tiles [start, end): for each tile, tokens go by in
// groups small enough to stay in L2, and each row of the tile is dotted with every token of
// the group while it sits in L1.
func (w Weight) runTiles(start, end, rb, xrb, nTokens int, out []float32, dot func(row []byte, t int) float32) {
	tr := tileRows(rb, nTokens)
	tt := max(1, tileActBytes/xrb)
	for tile := start; tile < end; tile++ {
		r0 := tile * tr
		r1 := min(r0+tr, w.Rows)
		for t0 := 0; t0 < nTokens; t0 += tt {
			t1 := min(t0+tt, nTokens)
			for r := r0; r < r1; r++ {
				row := w.Data[r*rb : (r+1)*rb]
				for t := t0; t < t1; t++ {
					out[t*w.Rows+r] = dot(row, t)
				}
			}
		}
	}
}

// quantizeActivations quantizes nTokens rows of cols values of x into dst in format t (Q8_0
// or Q8_K), in parallel over tokens.
func quantizeActivations(p *Pool, t quant.Type, dst []byte, x []float32, nTokens, cols int) {
	bs, bb := t.BlockSize(), t.BlockBytes()
	nb := cols / bs
	quantize := func(start, end int) {
		for i := start; i < end; i++ {
			src, d := x[i*bs:(i+1)*bs], dst[i*bb:(i+1)*bb]
			if t == quant.Q8_0 {
				quant.QuantizeBlockQ8_0((*[32]float32)(src), (*[34]byte)(d))
			} else {
				quant.QuantizeBlockQ8_K((*[256]float32)(src), (*[292]byte)(d))
			}
		}
	}
	if nTokens == 1 {
		quantize(0, nb) // too little work to wake the pool for
		return
	}
	p.Run(nTokens*nb, quantize)
}
