package cpu

import (
	"fmt"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// fusedScratch holds MatMulSwiGLU's gate and up products for weight types without a fused
// path.
type fusedScratch struct {
	mu       sync.Mutex
	gate, up []float32
}

// MatMuls computes outs[i] = x · ws[i]ᵀ for nTokens tokens, bit for bit as MatMul would one
// weight after the other. When all weights are Q8_0, or all Q4_0, of one width (a layer's
// q, k and v projections), the activations are quantized once and the row panels of all
// weights are shared out to the pool's threads in one parallel loop; other weights are
// multiplied one by one.
func MatMuls(p *Pool, outs [][]float32, ws []Weight, x []float32, nTokens int) error {
	if len(outs) != len(ws) {
		return fmt.Errorf("cpu: matmuls: %d outputs for %d weights", len(outs), len(ws))
	}
	for i, w := range ws {
		if _, err := w.check(len(x), len(outs[i]), nTokens); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
	}
	if !fusable(ws) {
		for i, w := range ws {
			if err := MatMul(p, outs[i], w, x, nTokens); err != nil {
				return fmt.Errorf("weight %d: %w", i, err)
			}
		}
		return nil
	}
	s := &p.q0
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range ws {
		s.parts[i] = q0Part{w: w, out: outs[i]}
	}
	return s.start(p, len(ws), false, x[:nTokens*ws[0].Cols], nTokens)
}

// MatMulSwiGLU computes out = silu(x · gateᵀ) * (x · upᵀ) for nTokens tokens, bit for bit
// as MatMul with each weight followed by SwiGLU: out is [nTokens][gate.Rows], and gate and
// up have one shape. Q8_0 and Q4_0 weights take one parallel loop over the activations
// quantized once, in which a thread computes a few rows of gate and the same rows of up
// and writes only their SwiGLU; other types are multiplied one after the other.
func MatMulSwiGLU(p *Pool, out []float32, gate, up Weight, x []float32, nTokens int) error {
	if gate.Rows != up.Rows || gate.Cols != up.Cols {
		return fmt.Errorf("cpu: matmul swiglu: gate %dx%d and up %dx%d differ", gate.Rows, gate.Cols, up.Rows, up.Cols)
	}
	for _, w := range []Weight{gate, up} {
		if _, err := w.check(len(x), len(out), nTokens); err != nil {
			return fmt.Errorf("cpu: matmul swiglu: %w", err)
		}
	}
	ws := [2]Weight{gate, up}
	if !fusable(ws[:]) {
		n := nTokens * gate.Rows
		f := &p.fused
		f.mu.Lock()
		defer f.mu.Unlock()
		f.gate, f.up = grow(f.gate, n), grow(f.up, n)
		if err := MatMul(p, f.gate, gate, x, nTokens); err != nil {
			return err
		}
		if err := MatMul(p, f.up, up, x, nTokens); err != nil {
			return err
		}
		return SwiGLU(p, out[:n], f.gate, f.up)
	}
	s := &p.q0
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parts[0] = q0Part{w: gate, out: out}
	s.parts[1] = q0Part{w: up}
	return s.start(p, 2, true, x[:nTokens*gate.Cols], nTokens)
}

// fusable reports whether ws can be multiplied in one Q8_0/Q4_0 product: at most
// q0MaxParts weights, all Q8_0 or all Q4_0, of one width.
func fusable(ws []Weight) bool {
	if len(ws) == 0 || len(ws) > q0MaxParts {
		return false
	}
	for _, w := range ws {
		if w.Type != ws[0].Type || w.Cols != ws[0].Cols || (w.Type != quant.Q8_0 && w.Type != quant.Q4_0) {
			return false
		}
	}
	return true
}
