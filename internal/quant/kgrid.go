package quant

import (
	"fmt"
	"math"
)

// SuperGrid is the set of values one super-block (QKK values) of a k-quant type (Q4_K,
// Q5_K, Q6_K) can hold once its scales are chosen: element i's level L in [0, Levels)
// stands for D[i/Sub]*(L-Zero) - M[i/Sub], exactly as the decoder computes it. As with
// Grid, a quantizer that places each element itself (GPTQ) chooses the super-block's
// scales (and mins) first, then each element's level, and Pack writes the block.
type SuperGrid struct {
	Type   Type
	Sub    int // elements per sub-block: 32 (Q4_K, Q5_K) or 16 (Q6_K)
	Levels int
	Zero   int // the level that stands for -M: 32 for Q6_K, 0 otherwise
	D, M   [16]float32
	block  []byte // the block the scales were chosen for; Pack keeps its header
}

// SuperGridTypes lists the types SuperGrid supports.
var SuperGridTypes = []Type{Q4_K, Q5_K, Q6_K}

// HasSuperGrid reports whether t is one of SuperGridTypes.
func HasSuperGrid(t Type) bool {
	switch t {
	case Q4_K, Q5_K, Q6_K:
		return true
	}
	return false
}

// NewSuperGrid chooses the scales (and mins) of one super-block x (QKK values) as
// Quantize does, or as QuantizeWeighted does with importance (one weight per element, nil
// for none; Q6_K ignores it).
func NewSuperGrid(t Type, x, importance []float32) (SuperGrid, error) {
	if !HasSuperGrid(t) {
		return SuperGrid{}, fmt.Errorf("quant: no super-block grid for %s", t)
	}
	if len(x) != QKK || (importance != nil && len(importance) != QKK) {
		return SuperGrid{}, fmt.Errorf("quant: super-block grid of %d values (importance %d): want %d", len(x), len(importance), QKK)
	}
	g := SuperGrid{Type: t, block: make([]byte, t.BlockBytes())}
	var err error
	if importance != nil {
		err = QuantizeWeighted(t, x, importance, g.block)
	} else {
		err = Quantize(t, x, g.block)
	}
	if err != nil {
		return SuperGrid{}, err
	}
	switch t {
	case Q4_K, Q5_K:
		g.Sub, g.Levels = 32, 16
		if t == Q5_K {
			g.Levels = 32
		}
		d, dmin := getF16(g.block[0:]), getF16(g.block[2:])
		s := (*[12]byte)(g.block[4:16])
		for j := range 8 {
			sc, m := ScaleMinK4(j, s)
			g.D[j] = float32(d * float32(sc))
			g.M[j] = float32(dmin * float32(m))
		}
	case Q6_K:
		g.Sub, g.Levels, g.Zero = 16, 64, 32
		d := getF16(g.block[208:])
		for j := range 16 {
			g.D[j] = float32(d * float32(int8(g.block[192+j])))
		}
	}
	return g, nil
}

// Level returns the level of element i (0 <= i < QKK) whose value is nearest to v.
func (g SuperGrid) Level(i int, v float32) int {
	j := i / g.Sub
	if g.D[j] == 0 {
		return g.Zero
	}
	return clampInt(nearestInt((v+g.M[j])/g.D[j])+g.Zero, 0, g.Levels-1)
}

// Value returns the value level L of element i stands for, computed as the decoder
// computes it.
func (g SuperGrid) Value(i, L int) float32 {
	j := i / g.Sub
	return float32(g.D[j]*float32(L-g.Zero)) - g.M[j]
}

// Pack writes the super-block of QKK levels in g's type into dst (Type.BlockBytes()
// bytes): the scales g was chosen with, then the levels.
func (g SuperGrid) Pack(levels []int, dst []byte) {
	var L [256]uint8
	for i, l := range levels[:QKK] {
		L[i] = uint8(l)
	}
	copy(dst, g.block)
	switch g.Type {
	case Q4_K:
		packQ4_K(&L, (*[144]byte)(dst))
	case Q5_K:
		packQ5_K(&L, (*[176]byte)(dst))
	case Q6_K:
		packQ6_K(&L, (*[210]byte)(dst))
	}
}

// Refit chooses sub-block j's scale (and min) anew from x, its Sub values as they are now,
// keeping the super-block's scales of them, when that fits x better than the sub-block's
// present ones. A quantizer that changes later elements after a super-block's grid was
// chosen (GPTQ's error updates) can thus round each sub-block onto a range fitted to its
// values as they are when it reaches it. With importance (one weight per element of x, nil
// for none; Q6_K ignores it) the fit and the comparison weigh each element's error as
// NewSuperGrid does with importance.
func (g *SuperGrid) Refit(j int, x, importance []float32) {
	if len(x) != g.Sub || j < 0 || j >= QKK/g.Sub || (importance != nil && len(importance) != g.Sub) {
		return
	}
	if g.Type == Q6_K {
		importance = nil
	}
	old := g.sqErr(j, x, importance)
	d0, m0 := g.D[j], g.M[j]
	var hdr [18]byte
	switch g.Type {
	case Q4_K, Q5_K:
		copy(hdr[:], g.block[:16])
		d, dmin := getF16(g.block[0:]), getF16(g.block[2:])
		nmax, p := 15, qkx2Params{rmin: -1, rdelta: 0.1, nstep: 20}
		if g.Type == Q5_K {
			nmax, p = 31, qkx2Params{rmin: -0.5, rdelta: 0.1, nstep: 15}
		}
		var weights [32]float32
		var L, laux [32]uint8
		var sumX2 float32
		for _, v := range x {
			sumX2 += v * v
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range x {
			if importance != nil {
				weights[l] = importance[l] * float32(math.Sqrt(float64(2*sumX2/32+v*v)))
			} else {
				weights[l] = avX + float32(math.Abs(float64(v)))
			}
		}
		scale, mn := makeQKX2Quants(x, weights[:], nmax, L[:], laux[:], p)
		s := (*[12]byte)(g.block[4:16])
		var sc, m [8]uint8
		for k := range 8 {
			sc[k], m[k] = ScaleMinK4(k, s)
		}
		if d > 0 {
			sc[j] = uint8(clampInt(nearestInt(scale/d), 0, 63))
		}
		if dmin > 0 {
			m[j] = uint8(clampInt(nearestInt(mn/dmin), 0, 63))
		}
		clear(s[:])
		for k := range 8 {
			putScaleMinK4(k, sc[k], m[k], s)
		}
		g.D[j], g.M[j] = float32(d*float32(sc[j])), float32(dmin*float32(m[j]))
	case Q6_K:
		hdr[0] = g.block[192+j]
		d := getF16(g.block[208:])
		if d == 0 {
			return
		}
		var L [16]uint8
		sc := int8(clampInt(nearestInt(makeQXQuants(x, 32, L[:])/d), -128, 127))
		g.block[192+j] = byte(sc)
		g.D[j] = float32(d * float32(sc))
	}
	if g.sqErr(j, x, importance) < old {
		return
	}
	g.D[j], g.M[j] = d0, m0 // the present fit was no worse: keep it
	if g.Type == Q6_K {
		g.block[192+j] = hdr[0]
	} else {
		copy(g.block[:16], hdr[:16])
	}
}

// sqErr is the squared error of sub-block j's values x rounded onto g, each element's
// weighed by importance as Refit weighs it (nil: unweighted).
func (g *SuperGrid) sqErr(j int, x, importance []float32) float64 {
	var sumX2 float64
	for _, v := range x {
		sumX2 += float64(v) * float64(v)
	}
	var e float64
	for l, v := range x {
		i := j*g.Sub + l
		d := float64(v - g.Value(i, g.Level(i, v)))
		w := 1.0
		if importance != nil {
			w = float64(importance[l]) * math.Sqrt(2*sumX2/float64(len(x))+float64(v)*float64(v))
		}
		e += w * d * d
	}
	return e
}
