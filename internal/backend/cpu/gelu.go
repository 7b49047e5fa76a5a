package cpu

import (
	"fmt"
	"math"
)

// GeGLU computes out = gelu(gate) * up element-wise with the tanh approximation of GELU
// (PyTorch's gelu(approximate="tanh"), Gemma's hidden_activation gelu_pytorch_tanh):
// gelu(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g³))). out may be gate or up. Each
// value is computed in float64 from its own gate and up values and rounded once, so the
// result depends on nothing but them.
func GeGLU(p *Pool, out, gate, up []float32) error {
	n := len(out)
	if len(gate) != n || len(up) != n {
		return fmt.Errorf("cpu: geglu: lengths out=%d gate=%d up=%d differ", n, len(gate), len(up))
	}
	runRows(p, n, 1, func(start, end int) {
		g, u, o := gate[start:end], up[start:end], out[start:end]
		for i := range o {
			o[i] = float32(GeluTanh(float64(g[i])) * float64(u[i]))
		}
	})
	return nil
}

// sqrt2OverPi is sqrt(2/pi), the slope of GELU's tanh approximation.
var sqrt2OverPi = math.Sqrt(2 / math.Pi)

// GeluTanh is the tanh approximation of GELU.
func GeluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+0.044715*x*x*x)))
}

// Scale multiplies every element of x by s in place.
func Scale(p *Pool, x []float32, s float32) {
	runRows(p, len(x), 1, func(start, end int) {
		for i, v := range x[start:end] {
			x[start+i] = v * s
		}
	})
}

// Softcap returns c * tanh(v / c), v squeezed smoothly into (-c, c) (Gemma 2's attention
// and final logit soft-capping). It is computed in float64 and rounded once.
func Softcap(v, c float32) float32 {
	return float32(float64(c) * math.Tanh(float64(v)/float64(c)))
}
