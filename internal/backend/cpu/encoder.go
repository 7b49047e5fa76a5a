package cpu

import (
	"fmt"
	"math"
)

// The kernels of bidirectional encoders (BERT): LayerNorm with bias, the erf form of GELU,
// attention of every token over its whole sequence, and pooling a sequence's rows.

// LayerNorm writes ((y - mean) / sqrt(var + eps)) * weight + bias to out for each of rows
// rows, where y = x + add (add may be nil). Mean and variance are accumulated in float64,
// over the row's values, the variance being the mean squared deviation (as PyTorch's
// LayerNorm, biased). out may alias x or add.
func LayerNorm(p *Pool, out, x, add, weight, bias []float32, rows int, eps float32) error {
	dim := len(weight)
	if err := checkRows("layernorm", dim, rows, len(out), len(x)); err != nil {
		return err
	}
	if len(bias) != dim || (add != nil && len(add) < rows*dim) {
		return fmt.Errorf("cpu: layernorm: bias of %d, add of %d for %d rows of %d", len(bias), len(add), rows, dim)
	}
	runRows(p, rows, dim, func(start, end int) {
		y := make([]float32, dim)
		for t := start; t < end; t++ {
			copy(y, x[t*dim:(t+1)*dim])
			if add != nil {
				for i, a := range add[t*dim : (t+1)*dim] {
					y[i] += a
				}
			}
			layerNormRow(out[t*dim:(t+1)*dim], y, weight, bias, eps)
		}
	})
	return nil
}

// layerNormRow normalizes one row y into out.
func layerNormRow(out, y, weight, bias []float32, eps float32) {
	var sum float64
	for _, v := range y {
		sum += float64(v)
	}
	mean := sum / float64(len(y))
	var sq float64
	for _, v := range y {
		d := float64(v) - mean
		sq += d * d
	}
	inv := 1 / math.Sqrt(sq/float64(len(y))+float64(eps))
	for i, v := range y {
		out[i] = float32((float64(v)-mean)*inv)*weight[i] + bias[i]
	}
}

// GELU writes x * Φ(x) = x/2 * (1 + erf(x/√2)) to out element-wise (out may be x).
func GELU(p *Pool, out, x []float32) error {
	if len(out) != len(x) {
		return fmt.Errorf("cpu: gelu: out of %d values for %d", len(out), len(x))
	}
	const chunk = 4096
	runRows(p, (len(x)+chunk-1)/chunk, chunk, func(start, end int) {
		for i := start * chunk; i < min(end*chunk, len(x)); i++ {
			v := float64(x[i])
			out[i] = float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
		}
	})
	return nil
}

// GELUGLU writes GELU(gate) * up to out element-wise with the erf form of GELU (out may
// be gate or up).
func GELUGLU(p *Pool, out, gate, up []float32) error {
	if len(gate) != len(out) || len(up) != len(out) {
		return fmt.Errorf("cpu: gelu glu: lengths out=%d gate=%d up=%d differ", len(out), len(gate), len(up))
	}
	const chunk = 4096
	runRows(p, (len(out)+chunk-1)/chunk, chunk, func(start, end int) {
		for i := start * chunk; i < min(end*chunk, len(out)); i++ {
			g := float64(gate[i])
			out[i] = float32(0.5 * g * (1 + math.Erf(g/math.Sqrt2)) * float64(up[i]))
		}
	})
	return nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// BidirectionalAttention computes, for every token t of sequence s (tokens
// [starts[s], starts[s+1])) and every head h, softmax over the sequence's tokens j of
// scale * q[t,h]·k[j,h] - slopes[h] * |t - j| (ALiBi's bias; slopes nil: none), and writes
// the weighted sum of v[j,h] to out[t,h]. q, k, v and out are [tokens][heads*headDim].
func BidirectionalAttention(p *Pool, out, q, k, v []float32, starts []int32, heads, headDim int, scale float32, slopes []float32) error {
	if len(starts) < 2 || heads <= 0 || headDim <= 0 || (slopes != nil && len(slopes) != heads) {
		return fmt.Errorf("cpu: bidirectional attention: %d sequence bounds, %d heads of %d, %d ALiBi slopes", len(starts), heads, headDim, len(slopes))
	}
	n := int(starts[len(starts)-1])
	width := heads * headDim
	if err := checkRows("bidirectional attention", width, n, len(out), len(q), len(k), len(v)); err != nil {
		return err
	}
	seqOf := make([]int, n)
	for s := 0; s+1 < len(starts); s++ {
		if starts[s] > starts[s+1] || starts[s] < 0 {
			return fmt.Errorf("cpu: bidirectional attention: sequence %d spans [%d, %d)", s, starts[s], starts[s+1])
		}
		for t := starts[s]; t < starts[s+1]; t++ {
			seqOf[t] = s
		}
	}
	kern := p.kern
	runRows(p, n*heads, headDim*16, func(start, end int) {
		var scores []float32
		for th := start; th < end; th++ {
			t, h := th/heads, th%heads
			s := seqOf[t]
			lo, hi := int(starts[s]), int(starts[s+1])
			scores = append(scores[:0], make([]float32, hi-lo)...)
			qt := q[t*width+h*headDim:][:headDim]
			kern.attnScores(scores, qt, k[lo*width+h*headDim:], width)
			best := float32(math.Inf(-1))
			for j := range scores {
				scores[j] *= scale
				if slopes != nil {
					scores[j] -= slopes[h] * float32(abs(t-lo-j))
				}
				best = max(best, scores[j])
			}
			var total float32
			for j, sc := range scores {
				e := float32(math.Exp(float64(sc - best)))
				scores[j] = e
				total += e
			}
			for j := range scores {
				scores[j] /= total
			}
			o := out[t*width+h*headDim:][:headDim]
			clear(o)
			kern.attnWsum(o, scores, v[lo*width+h*headDim:], width)
		}
	})
	return nil
}

// PoolRows writes one vector per sequence to dst ([sequences][cols]): the mean of the rows
// [starts[s], starts[s+1]) of x, the first of them (cls) or the last (last).
func PoolRows(dst, x []float32, cols int, starts []int32, first, last bool) error {
	seqs := len(starts) - 1
	if seqs <= 0 || cols <= 0 || len(dst) != seqs*cols || len(x) < int(starts[seqs])*cols {
		return fmt.Errorf("cpu: pool rows: %d values for %d sequences of %d, input of %d", len(dst), seqs, cols, len(x))
	}
	for s := range seqs {
		lo, hi := int(starts[s]), int(starts[s+1])
		if lo < 0 || hi <= lo {
			return fmt.Errorf("cpu: pool rows: sequence %d spans [%d, %d)", s, lo, hi)
		}
		d := dst[s*cols : (s+1)*cols]
		switch {
		case first:
			copy(d, x[lo*cols:][:cols])
		case last:
			copy(d, x[(hi-1)*cols:][:cols])
		default:
			acc := make([]float64, cols)
			for t := lo; t < hi; t++ {
				for i, v := range x[t*cols : (t+1)*cols] {
					acc[i] += float64(v)
				}
			}
			for i := range d {
				d[i] = float32(acc[i] / float64(hi-lo))
			}
		}
	}
	return nil
}
