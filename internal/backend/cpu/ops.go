package cpu

import (
	"fmt"
	"math"
)

// parallelMin is the element count below which element-wise ops run on the calling goroutine.
const parallelMin = 1 << 15

// RMSNorm normalizes each of nTokens rows of x (each len(weight) long) by its root mean
// square and multiplies by weight: out = x / sqrt(mean(x²) + eps) * weight. out may be x.
func RMSNorm(p *Pool, out, x, weight []float32, nTokens int, eps float32) error {
	dim := len(weight)
	if err := checkRows("rmsnorm", dim, nTokens, len(out), len(x)); err != nil {
		return err
	}
	k := p.kern
	rows := func(start, end int) {
		for t := start; t < end; t++ {
			xt := x[t*dim : (t+1)*dim]
			normRow(k, out[t*dim:(t+1)*dim], xt, weight, eps)
		}
	}
	runRows(p, nTokens, dim, rows)
	return nil
}

// RMSNormResidual is the fused residual step of a pre-norm transformer: for each of nTokens
// rows it adds x into residual (residual += x) and writes RMSNorm(residual) * weight to out.
func RMSNormResidual(p *Pool, out, residual, x, weight []float32, nTokens int, eps float32) error {
	dim := len(weight)
	if err := checkRows("rmsnorm residual", dim, nTokens, len(out), len(residual), len(x)); err != nil {
		return err
	}
	k := p.kern
	rows := func(start, end int) {
		for t := start; t < end; t++ {
			rt := residual[t*dim : (t+1)*dim]
			k.axpy(rt, 1, x[t*dim:(t+1)*dim])
			normRow(k, out[t*dim:(t+1)*dim], rt, weight, eps)
		}
	}
	runRows(p, nTokens, dim, rows)
	return nil
}

func normRow(k *kernels, out, x, weight []float32, eps float32) {
	ss := k.dotF32(x, x)
	inv := float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
	out = out[:len(x)]
	weight = weight[:len(x)]
	for i, v := range x {
		out[i] = v * inv * weight[i]
	}
}

// checkRows verifies that every length in lens holds nTokens rows of dim values.
func checkRows(op string, dim, nTokens int, lens ...int) error {
	if dim <= 0 || nTokens <= 0 {
		return fmt.Errorf("cpu: %s: bad shape: %d tokens of %d values", op, nTokens, dim)
	}
	for i, n := range lens {
		if n < nTokens*dim {
			return fmt.Errorf("cpu: %s: operand %d has %d values, need %d tokens x %d", op, i, n, nTokens, dim)
		}
	}
	return nil
}

// runRows runs fn over [0, rows) on the pool when there is enough work.
func runRows(p *Pool, rows, rowLen int, fn func(start, end int)) {
	if rows == 1 || rows*rowLen < parallelMin {
		fn(0, rows)
		return
	}
	p.Run(rows, fn)
}

// RopeStyle selects which elements rotary position embedding pairs up.
type RopeStyle int

const (
	// RopeInterleaved rotates pairs (2i, 2i+1), as LLaMA checkpoints in GGUF and llama2.c do.
	RopeInterleaved RopeStyle = iota
	// RopeNeoX rotates pairs (i, i+ropeDim/2), as GPT-NeoX and HF LLaMA/Qwen layouts do.
	RopeNeoX
)

// RopeTables returns the cos and sin tables RoPE takes: for position pos < maxPos and pair
// i < ropeDim/2, index pos*ropeDim/2 + i holds cos/sin(pos * theta^(-2i/ropeDim)).
func RopeTables(maxPos, ropeDim int, theta float64) (cos, sin []float32) {
	half := ropeDim / 2
	cos = make([]float32, maxPos*half)
	sin = make([]float32, maxPos*half)
	for pos := range maxPos {
		for i := range half {
			freq := math.Pow(theta, -float64(2*i)/float64(ropeDim))
			s, c := math.Sincos(float64(pos) * freq)
			cos[pos*half+i], sin[pos*half+i] = float32(c), float32(s)
		}
	}
	return cos, sin
}

// Rope applies rotary position embeddings in place to x, laid out [nTokens][heads][headDim],
// token t at position positions[t]. Only the first ropeDim values of each head rotate
// (ropeDim is even and at most headDim); cos and sin are tables from RopeTables.
func Rope(p *Pool, x []float32, nTokens, heads, headDim, ropeDim int, positions []int32, cos, sin []float32, style RopeStyle) error {
	if heads <= 0 || headDim <= 0 || ropeDim <= 0 || ropeDim > headDim || ropeDim%2 != 0 {
		return fmt.Errorf("cpu: rope: bad shape heads=%d headDim=%d ropeDim=%d", heads, headDim, ropeDim)
	}
	if err := checkRows("rope", heads*headDim, nTokens, len(x)); err != nil {
		return err
	}
	if len(positions) < nTokens {
		return fmt.Errorf("cpu: rope: %d positions for %d tokens", len(positions), nTokens)
	}
	half := ropeDim / 2
	maxPos := min(len(cos), len(sin)) / half
	for _, pos := range positions[:nTokens] {
		if pos < 0 || int(pos) >= maxPos {
			return fmt.Errorf("cpu: rope: position %d outside the tables' %d positions", pos, maxPos)
		}
	}
	if style != RopeInterleaved && style != RopeNeoX {
		return fmt.Errorf("cpu: rope: unknown style %d", style)
	}
	rows := func(start, end int) {
		for t := start; t < end; t++ {
			c := cos[int(positions[t])*half:][:half]
			s := sin[int(positions[t])*half:][:half]
			for h := range heads {
				v := x[(t*heads+h)*headDim:][:ropeDim]
				if style == RopeInterleaved {
					for i := range half {
						a, b := v[2*i], v[2*i+1]
						v[2*i] = a*c[i] - b*s[i]
						v[2*i+1] = a*s[i] + b*c[i]
					}
				} else {
					lo, hi := v[:half], v[half:ropeDim]
					for i := range half {
						a, b := lo[i], hi[i]
						lo[i] = a*c[i] - b*s[i]
						hi[i] = a*s[i] + b*c[i]
					}
				}
			}
		}
	}
	runRows(p, nTokens, heads*headDim, rows)
	return nil
}

// SwiGLU computes out = silu(gate) * up element-wise, silu(g) = g / (1 + e^-g). out may be
// gate or up. Each value's result depends on its gate and up values alone, not on where it
// lies, so that MatMulSwiGLU, which computes a few rows at a time, gives the same bits.
func SwiGLU(p *Pool, out, gate, up []float32) error {
	n := len(out)
	if len(gate) != n || len(up) != n {
		return fmt.Errorf("cpu: swiglu: lengths out=%d gate=%d up=%d differ", n, len(gate), len(up))
	}
	k := p.kern
	fn := func(start, end int) {
		var e [swigluChunk]float32
		siluMul(k, out[start:end], gate[start:end], up[start:end], e[:])
	}
	runRows(p, n, 1, fn)
	return nil
}

// swigluChunk is how many values SwiGLU exponentiates per kernel call.
const swigluChunk = 256

// siluMul sets out[i] = silu(gate[i]) * up[i] over len(out); out may be gate or up. e is
// scratch for the exponentials, at least 8 long: they are taken in runs of whole vectors
// of 8 (the last padded), so that every value goes through the same exp kernel code
// whatever the length and offset.
func siluMul(k *kernels, out, gate, up, e []float32) {
	n := len(out)
	gate, up = gate[:n], up[:n]
	step := len(e) &^ 7
	for c := 0; c < n; c += step {
		m := min(step, n-c)
		g := gate[c : c+m]
		for i, v := range g {
			e[i] = -v
		}
		m8 := (m + 7) &^ 7
		clear(e[m:m8])
		k.exp(e[:m8], e[:m8])
		k.siluCombine(out[c:c+m], g, up[c:c+m], e[:m])
	}
}

// siluCombineGeneric is the scalar twin of the siluCombine kernels.
func siluCombineGeneric(out, g, u, e []float32) {
	n := len(out)
	g, u, e = g[:n], u[:n], e[:n]
	for i, v := range g {
		out[i] = v / (1 + e[i]) * u[i]
	}
}

// Add computes dst = a + b element-wise; dst may be a or b.
func Add(p *Pool, dst, a, b []float32) error {
	n := len(dst)
	if len(a) != n || len(b) != n {
		return fmt.Errorf("cpu: add: lengths dst=%d a=%d b=%d differ", n, len(a), len(b))
	}
	fn := func(start, end int) {
		d, x, y := dst[start:end], a[start:end], b[start:end]
		for i := range d {
			d[i] = x[i] + y[i]
		}
	}
	runRows(p, n, 1, fn)
	return nil
}

// Softmax replaces x with softmax(x) in place, computed stably (max subtracted). An empty
// slice is left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		x[i] = float32(e)
		sum += e
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}
