package quant

import "fmt"

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
