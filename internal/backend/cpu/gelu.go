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

// SumSquares writes the sum of the squares of each row of x (rows of dim values) into
// out[row], summed in float64.
func SumSquares(p *Pool, out, x []float32, dim int) error {
	if dim <= 0 || len(x) != len(out)*dim {
		return fmt.Errorf("cpu: sum squares: %d values for %d rows of %d", len(x), len(out), dim)
	}
	runRows(p, len(out), dim, func(start, end int) {
		for r := start; r < end; r++ {
			var s float64
			for _, v := range x[r*dim : (r+1)*dim] {
				s += float64(v) * float64(v)
			}
			out[r] = float32(s)
		}
	})
	return nil
}

// RMSNormSplit normalizes each row of x (rows of len(weight) values) in place by the sum of
// squares of its whole row, sumSquares[row], over n values: x / sqrt(sumSquares/n + eps) *
// weight.
func RMSNormSplit(p *Pool, x, sumSquares, weight []float32, n int, eps float32) error {
	dim := len(weight)
	if dim == 0 || n <= 0 || len(x) != len(sumSquares)*dim {
		return fmt.Errorf("cpu: rmsnorm split: %d values for %d rows of %d (whole rows of %d)", len(x), len(sumSquares), dim, n)
	}
	runRows(p, len(sumSquares), dim, func(start, end int) {
		for r := start; r < end; r++ {
			inv := float32(1 / math.Sqrt(float64(sumSquares[r])/float64(n)+float64(eps)))
			row := x[r*dim : (r+1)*dim]
			for i, v := range row {
				row[i] = v * inv * weight[i]
			}
		}
	})
	return nil
}
