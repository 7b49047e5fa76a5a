package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Grid is the set of values one block of a legacy type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) can
// hold once its scale is chosen: level L in [0, Levels) stands for D*(L-Zero) + M, exactly
// as the decoder computes it. Quantizers that place each element themselves (GPTQ, which
// quantizes one column at a time and compensates the error in the others) choose the grid
// of a block first, then the level of each element, and Pack writes the block.
type Grid struct {
	Type   Type
	D, M   float32 // the block's scale and, for the type-1 forms (Q4_1, Q5_1), its offset
	Zero   int     // the level that stands for M (8 for Q4_0, 16 for Q5_0, 0 otherwise)
	Levels int
}

// GridTypes lists the types Grid supports.
var GridTypes = []Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0}

// HasGrid reports whether t is one of GridTypes.
func HasGrid(t Type) bool {
	switch t {
	case Q4_0, Q4_1, Q5_0, Q5_1, Q8_0:
		return true
	}
	return false
}

// NewGrid chooses the grid of one block x (QK values) as Quantize does: from the element
// of largest magnitude (Q4_0, Q5_0, Q8_0) or from the range (Q4_1, Q5_1). With importance
// (one non-negative weight per element; nil for none) it instead searches scales around
// that choice for the least importance-weighted squared error, as llama.cpp's quantizers
// do with an importance matrix.
func NewGrid(t Type, x, importance []float32) (Grid, error) {
	if !HasGrid(t) {
		return Grid{}, fmt.Errorf("quant: no block grid for %s", t)
	}
	if len(x) != QK || (importance != nil && len(importance) != QK) {
		return Grid{}, fmt.Errorf("quant: grid of %d values (importance %d): want %d", len(x), len(importance), QK)
	}
	g := rtnGrid(t, x)
	if importance == nil {
		return g, nil
	}
	return searchGrid(t, x, importance, g), nil
}

// rtnGrid is the grid the plain encoders of this package choose.
func rtnGrid(t Type, x []float32) Grid {
	g := Grid{Type: t}
	switch t {
	case Q4_0, Q5_0:
		g.Levels, g.Zero = 16, 8
		if t == Q5_0 {
			g.Levels, g.Zero = 32, 16
		}
		mx, _ := absMax(x)
		g.D = f16Round(mx / -float32(g.Zero))
	case Q8_0:
		g.Levels, g.Zero = 255, 127 // int8 -127..127 stored as L-127
		_, amax := absMax(x)
		g.D = f16Round(amax / 127)
	case Q4_1, Q5_1:
		g.Levels = 16
		if t == Q5_1 {
			g.Levels = 32
		}
		lo, hi := minMax(x)
		g.D = f16Round((hi - lo) / float32(g.Levels-1))
		g.M = f16Round(lo)
	}
	return g
}

// searchGrid looks for the grid of least weighted error near g: scales from 0.85 to 1.15
// times g's, each refined by weighted least squares for its levels (scale and offset for
// the type-1 forms).
func searchGrid(t Type, x, importance []float32, g Grid) Grid {
	var sumX2 float64
	for _, v := range x {
		sumX2 += float64(v) * float64(v)
	}
	sigma2 := sumX2 / float64(len(x))
	w := make([]float64, len(x))
	for i, v := range x {
		w[i] = float64(importance[i]) * math.Sqrt(sigma2+float64(v)*float64(v))
	}
	best, bestErr := g, g.weightedError(x, w)
	if g.D == 0 {
		return best
	}
	levels := make([]int, len(x))
	for step := -15; step <= 15; step++ {
		c := g
		c.D = f16Round(g.D * (1 + 0.01*float32(step)))
		for i, v := range x {
			levels[i] = c.Level(v)
		}
		// Least squares for this assignment of levels: v ~ D*(L-Zero) (+ M).
		var swq, swqq, swx, swqx, sw float64
		for i, v := range x {
			q := float64(levels[i] - c.Zero)
			swq += w[i] * q
			swqq += w[i] * q * q
			swx += w[i] * float64(v)
			swqx += w[i] * q * float64(v)
			sw += w[i]
		}
		if t == Q4_1 || t == Q5_1 {
			if det := sw*swqq - swq*swq; det > 0 {
				c.D = f16Round(float32((sw*swqx - swq*swx) / det))
				c.M = f16Round(float32((swqq*swx - swq*swqx) / det))
			}
		} else if swqq > 0 {
			c.D = f16Round(float32(swqx / swqq))
		}
		for _, cand := range []Grid{c} {
			if e := cand.weightedError(x, w); e < bestErr {
				best, bestErr = cand, e
			}
		}
	}
	return best
}

// weightedError is sum w (x - nearest grid value)^2.
func (g Grid) weightedError(x []float32, w []float64) float64 {
	var e float64
	for i, v := range x {
		d := float64(v - g.Value(g.Level(v)))
		e += w[i] * d * d
	}
	return e
}

// Level returns the level whose value is nearest to v.
func (g Grid) Level(v float32) int {
	if g.D == 0 {
		return g.Zero
	}
	return clampInt(nearestInt((v-g.M)/g.D)+g.Zero, 0, g.Levels-1)
}

// Value returns the value level L stands for, computed as the decoder computes it.
func (g Grid) Value(L int) float32 {
	switch g.Type {
	case Q4_1, Q5_1:
		return float32(float32(L)*g.D) + g.M
	}
	return float32(L-g.Zero) * g.D
}

// Pack writes the block of QK levels in g's type into dst (Type.BlockBytes() bytes).
func (g Grid) Pack(levels []int, dst []byte) {
	putF16(dst[0:], g.D)
	switch g.Type {
	case Q4_0:
		for j := range 16 {
			dst[2+j] = byte(levels[j]) | byte(levels[j+16])<<4
		}
	case Q4_1:
		putF16(dst[2:], g.M)
		for j := range 16 {
			dst[4+j] = byte(levels[j]) | byte(levels[j+16])<<4
		}
	case Q5_0, Q5_1:
		off := 2
		if g.Type == Q5_1 {
			putF16(dst[2:], g.M)
			off = 4
		}
		var qh uint32
		for j := range 16 {
			q0, q1 := levels[j], levels[j+16]
			dst[off+4+j] = byte(q0&0xf) | byte(q1&0xf)<<4
			qh |= uint32(q0>>4) << j
			qh |= uint32(q1>>4) << (j + 16)
		}
		binary.LittleEndian.PutUint32(dst[off:], qh)
	case Q8_0:
		for j := range 32 {
			dst[2+j] = byte(int8(levels[j] - g.Zero))
		}
	}
}

// f16Round returns v rounded to the nearest half-precision value, as the block stores it.
func f16Round(v float32) float32 { return F16ToF32(F32ToF16(v)) }

// QuantizeWeighted is Quantize with an importance weight per element of src (per column
// of each row, repeated): the legacy types search their block scales for the least
// weighted error (NewGrid), Q4_K and Q5_K weigh their sub-block fits by it; other types
// ignore it and encode as Quantize does.
func QuantizeWeighted(t Type, src, importance []float32, dst []byte) error {
	if len(importance) != len(src) {
		return fmt.Errorf("quantize: %d importance weights for %d values", len(importance), len(src))
	}
	if err := checkSizes("quantize", t, len(src), len(dst)); err != nil {
		return err
	}
	switch {
	case HasGrid(t):
		levels := make([]int, QK)
		bb := t.BlockBytes()
		for i := range len(src) / QK {
			x, w := src[QK*i:QK*(i+1)], importance[QK*i:QK*(i+1)]
			g := searchGrid(t, x, w, rtnGrid(t, x))
			for j, v := range x {
				levels[j] = g.Level(v)
			}
			g.Pack(levels, dst[bb*i:])
		}
		return nil
	case t == Q4_K || t == Q5_K:
		bb := t.BlockBytes()
		for i := range len(src) / QKK {
			x := (*[256]float32)(src[QKK*i:])
			imp := (*[256]float32)(importance[QKK*i:])
			if t == Q4_K {
				quantizeBlockQ4_KWeighted(x, imp, (*[144]byte)(dst[bb*i:]))
			} else {
				quantizeBlockQ5_KWeighted(x, imp, (*[176]byte)(dst[bb*i:]))
			}
		}
		return nil
	}
	return Quantize(t, src, dst)
}
