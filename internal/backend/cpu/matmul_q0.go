package cpu

import (
	"fmt"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// rows8 is the number of weight rows the Q8_0 and Q4_0 kernels take at once: the lanes of
// one float32 vector, one per row.
const rows8 = 8

// q0Product holds the buffers of the Q8_0/Q4_0 path, owned by a Pool and reused from call
// to call so that the path allocates nothing once warm, and the product in progress.
type q0Product struct {
	mu    sync.Mutex           // serializes products on the Pool
	xq    []byte               // the activations in Q8_0, [nTokens][xrb]
	quant func(start, end int) // s.quantize, bound once
	run   func(start, end int) // s.multiply, bound once
	q0GEMMState

	// The product in progress, set under mu.
	kern    *kernels
	kernel  func(w []byte, stride int, x []byte, nb int, out []float32)
	dot     func(w, x []byte, nb int) float32
	w       Weight
	rb, xrb int
	nTokens int
	x, out  []float32
}

// matMulQ0 computes the product of Q8_0 or Q4_0 weights (rb bytes per row) with nTokens
// tokens of activations x, as llama.cpp does for these types: each token's activations are
// quantized once to Q8_0, then every block of every row meets every token's block in
// integers, and the exact int32 block sums are scaled by d_w*d_x and summed in float32 in
// block order (see dotQ8_0Generic). One kernel serves one token (decode) and many (prefill,
// batched decode) alike, so that a token's outputs do not depend on the batch it runs in.
//
// Fewer than q0MinTokens tokens run through the 8-row kernels straight off the weights:
// work is split over panels of 8 weight rows; a panel meets the tokens one after the other
// while its rows stay in cache. Rows past the last whole panel take the scalar reference,
// which gives the same bits. More tokens take the many-token path (matMulGEMM in
// gemm_q0.go), whose tiles run tokens along the vector lanes with the same arithmetic.
func matMulQ0(p *Pool, out []float32, w Weight, rb int, x []float32, nTokens int) error {
	xrb, err := quant.Q8_0.RowBytes(w.Cols)
	if err != nil {
		return fmt.Errorf("cpu: matmul: activations: %w", err)
	}
	s := &p.q0
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		s.quant, s.run = s.quantize, s.multiply
	}
	if s.pack == nil {
		s.pack, s.gemm = s.packBlocks, s.work
	}
	s.kern, s.kernel, s.dot = p.kern, p.kern.rows8Q8_0, dotQ8_0Generic
	if w.Type == quant.Q4_0 {
		s.kernel, s.dot = p.kern.rows8Q4_0, dotQ4_0Generic
	}
	s.w, s.rb, s.xrb, s.nTokens, s.x, s.out = w, rb, xrb, nTokens, x, out
	s.xq = grow(s.xq, nTokens*xrb)

	nb := w.Cols / 32
	if nTokens >= q0MinTokens {
		s.matMulGEMM(p)
		s.x, s.out, s.w = nil, nil, Weight{}
		return nil
	}
	if nTokens == 1 {
		s.quantize(0, nb) // too little work to wake the pool for
	} else {
		p.Run(nTokens*nb, s.quant)
	}
	p.Run((w.Rows+rows8-1)/rows8, s.run)
	s.x, s.out, s.w = nil, nil, Weight{}
	return nil
}

// quantize quantizes activation blocks [start, end) (counted over all tokens) to Q8_0.
func (s *q0Product) quantize(start, end int) {
	s.kern.quantQ8_0(s.xq[start*q8_0Bytes:end*q8_0Bytes], s.x[start*32:end*32])
}

// multiply computes the outputs of row panels [start, end) for every token.
func (s *q0Product) multiply(start, end int) {
	rows, rb, xrb, nb := s.w.Rows, s.rb, s.xrb, s.w.Cols/32
	for g := start; g < end; g++ {
		r := rows8 * g
		for t := range s.nTokens {
			xt := s.xq[t*xrb : (t+1)*xrb]
			if r+rows8 <= rows {
				s.kernel(s.w.Data[r*rb:], rb, xt, nb, s.out[t*rows+r:])
				continue
			}
			for i := r; i < rows; i++ {
				s.out[t*rows+i] = s.dot(s.w.Data[i*rb:(i+1)*rb], xt, nb)
			}
		}
	}
}
