package cpu

import (
	"fmt"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// rows8 is the number of weight rows the Q8_0 and Q4_0 kernels take at once: the lanes of
// one float32 vector, one per row.
const rows8 = 8

// q0MaxParts is the most weights one Q8_0/Q4_0 product multiplies together (q, k and v).
const q0MaxParts = 3

// q0Part is one weight of a Q8_0/Q4_0 product and where its results go.
type q0Part struct {
	w     Weight
	out   []float32 // [nTokens][w.Rows]
	first int       // the index of the part's first panel in the product's panel numbering
}

// q0Product holds the buffers of the Q8_0/Q4_0 path, owned by a Pool and reused from call
// to call so that the path allocates nothing once warm, and the product in progress.
//
// A product multiplies one input by up to q0MaxParts weights of one type and width: their
// row panels are numbered one part after the other, so that all of them are claimed by the
// pool's threads in one parallel loop over activations quantized once. In SwiGLU mode the
// two parts are a gate and an up weight of the same shape, numbered once: a panel computes
// rows of both and writes silu(gate)*up to the first part's out.
type q0Product struct {
	mu    sync.Mutex           // serializes products on the Pool
	xq    []byte               // the activations in Q8_0, [nTokens][xrb]
	swi   []float32            // SwiGLU mode's gate, up and exp rows, 3*rows8 per panel
	quant func(start, end int) // s.quantize, bound once
	run   func(start, end int) // s.multiply, bound once
	q0GEMMState

	// The product in progress, set under mu.
	kern    *kernels
	kernel  func(w []byte, stride int, x []byte, nb int, out []float32)
	dot     func(w, x []byte, nb int) float32
	typ     quant.Type
	cols    int
	rb, xrb int
	nTokens int
	x       []float32
	parts   [q0MaxParts]q0Part
	nParts  int
	swiglu  bool
}

// matMulQ0 computes the product of Q8_0 or Q4_0 weights with nTokens tokens of activations
// x (see q0Product.run).
func matMulQ0(p *Pool, out []float32, w Weight, x []float32, nTokens int) error {
	s := &p.q0
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parts[0] = q0Part{w: w, out: out}
	return s.start(p, 1, false, x, nTokens)
}

// start runs the product of the first n parts (set by the caller) with nTokens tokens of x,
// as llama.cpp multiplies these types: each token's activations are quantized once to
// Q8_0, then every block of every row meets every token's block in integers, and the exact
// int32 block sums are scaled by d_w*d_x and summed in float32 in block order (see
// dotQ8_0Generic). One arithmetic serves one token (decode) and many (prefill, batched
// decode) alike, so that a token's outputs do not depend on the batch it runs in, nor on
// the weights it is multiplied with alongside.
//
// Fewer than q0MinTokens tokens run through the 8-row kernels straight off the weights:
// work is split over panels of 8 weight rows; a panel meets the tokens one after the other
// while its rows stay in cache. Rows past a part's last whole panel take the scalar
// reference, which gives the same bits. More tokens take the many-token path (matMulGEMM
// in gemm_q0.go), whose tiles run tokens along the vector lanes with the same arithmetic.
func (s *q0Product) start(p *Pool, n int, swiglu bool, x []float32, nTokens int) error {
	w := s.parts[0].w
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		return fmt.Errorf("cpu: matmul: %w", err)
	}
	xrb, err := quant.Q8_0.RowBytes(w.Cols)
	if err != nil {
		return fmt.Errorf("cpu: matmul: activations: %w", err)
	}
	if s.run == nil {
		s.quant, s.run = s.quantize, s.multiply
		s.pack, s.gemm = s.packBlocks, s.work
	}
	s.kern, s.kernel, s.dot = p.kern, p.kern.rows8Q8_0, dotQ8_0Generic
	if w.Type == quant.Q4_0 {
		s.kernel, s.dot = p.kern.rows8Q4_0, dotQ4_0Generic
	}
	s.typ, s.cols, s.rb, s.xrb, s.nTokens, s.x = w.Type, w.Cols, rb, xrb, nTokens, x
	s.form = q0FormOf(p.kern, w.Type)
	s.nParts, s.swiglu = n, swiglu
	defer s.forget()
	if nTokens >= q0MinTokens {
		s.matMulGEMM(p, s.number(q0Rows))
		return nil
	}
	s.xq = grow(s.xq, nTokens*xrb)
	s.quantize(0, nTokens*w.Cols/32) // a few tokens: too little work to wake the pool for
	panels := s.number(rows8)
	if swiglu {
		s.swi = grow(s.swi, panels*3*rows8)
	}
	p.Run(panels, s.run)
	return nil
}

// number numbers the panels of size rows of the parts one after the other (the up part of
// a SwiGLU product shares the gate's numbers) and returns their count.
func (s *q0Product) number(rows int) int {
	n := 0
	for i := range s.nParts {
		if s.swiglu && i > 0 {
			s.parts[i].first = 0
			continue
		}
		s.parts[i].first = n
		n += (s.parts[i].w.Rows + rows - 1) / rows
	}
	return n
}

// part returns the part that panel g belongs to and g's index within it.
func (s *q0Product) part(g int) (*q0Part, int) {
	i := 0
	for !s.swiglu && i+1 < s.nParts && g >= s.parts[i+1].first {
		i++
	}
	return &s.parts[i], g - s.parts[i].first
}

// forget drops the references of the product just done.
func (s *q0Product) forget() {
	s.x = nil
	s.parts = [q0MaxParts]q0Part{}
}

// quantize quantizes activation blocks [start, end) (counted over all tokens) to Q8_0.
func (s *q0Product) quantize(start, end int) {
	s.kern.quantQ8_0(s.xq[start*q8_0Bytes:end*q8_0Bytes], s.x[start*32:end*32])
}

// multiply computes the outputs of 8-row panels [start, end) for every token.
func (s *q0Product) multiply(start, end int) {
	if s.swiglu {
		s.multiplySwiGLU(start, end)
		return
	}
	for g := start; g < end; g++ {
		pt, lg := s.part(g)
		for t := range s.nTokens {
			s.rows8(pt.w, lg, t, pt.out[t*pt.w.Rows+rows8*lg:])
		}
	}
}

// multiplySwiGLU computes 8-row panels [start, end) of the gate and the up weight for
// every token and writes silu(gate)*up.
func (s *q0Product) multiplySwiGLU(start, end int) {
	gate, up := &s.parts[0], &s.parts[1]
	rows := gate.w.Rows
	for g := start; g < end; g++ {
		buf := s.swi[3*rows8*g : 3*rows8*(g+1)] // the panel's own: panels run in parallel
		gv, uv, e := buf[:rows8], buf[rows8:2*rows8], buf[2*rows8:]
		r := rows8 * g
		nr := min(rows8, rows-r)
		for t := range s.nTokens {
			s.rows8(gate.w, g, t, gv)
			s.rows8(up.w, g, t, uv)
			siluMul(s.kern, gate.out[t*rows+r:][:nr], gv[:nr], uv[:nr], e)
		}
	}
}

// rows8 writes token t's products with rows 8g.. of w (8, or fewer in a last panel) to
// out, the first row's at out[0].
func (s *q0Product) rows8(w Weight, g, t int, out []float32) {
	rb, nb := s.rb, s.cols/32
	r := rows8 * g
	xt := s.xq[t*s.xrb : (t+1)*s.xrb]
	if r+rows8 <= w.Rows {
		s.kernel(w.Data[r*rb:], rb, xt, nb, out)
		return
	}
	for i := r; i < w.Rows; i++ {
		out[i-r] = s.dot(w.Data[i*rb:(i+1)*rb], xt, nb)
	}
}
