package cpu

import "math"

// The many-token path of BF16 weights on CPUs with AVX512-BF16 (gemmKernels.bf16): the
// activations are rounded to bfloat16, as the instruction VDPBF16PS needs, and packed by
// token groups in pairs of consecutive columns; the weights are read in place, two columns
// of a row being one dword. Products of two bfloat16 values are exact in float32, so the
// only rounding besides the activations' is that of each addition to a float32 sum.

// bf16RNE rounds f to the nearest bfloat16 (ties to even), as VCVTNEPS2BF16 does, and
// returns its bits; a NaN stays a (quiet) NaN.
func bf16RNE(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// bf16DAZ widens the bfloat16 bits h to float32 as VDPBF16PS reads its inputs: a denormal
// counts as a zero of its sign.
func bf16DAZ(h uint32) float32 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return math.Float32frombits(h << 16)
}

// ftz flushes a denormal float32 to a zero of its sign, as VDPBF16PS does with its results.
func ftz(f float32) float32 {
	if b := math.Float32bits(f); b&0x7f800000 == 0 {
		return math.Float32frombits(b & 0x80000000)
	}
	return f
}

// dpbf16 is one lane of VDPBF16PS: acc plus the products of the bfloat16 pairs w and x, the
// high halves first, then the low, each a fused multiply-add (the exact product, however
// large or small, added with one rounding to float32) whose result is flushed. The
// instruction's documentation writes the two steps as a product then a sum; measured, a
// product beyond float32's range does not become an infinity before it is added, so they
// are fused. The twin computes them in float64, where the product of two bfloat16 values
// is exact and the sum then rounded twice, to float64 and to float32, which gives the
// correctly rounded float32 (53 >= 2*24+2 bits).
func dpbf16(acc float32, w, x uint32) float32 {
	acc = fmaF32(bf16DAZ(w>>16), bf16DAZ(x>>16), acc)
	return fmaF32(bf16DAZ(w&0xffff), bf16DAZ(x&0xffff), acc)
}

// fmaF32 returns ftz(a*b + c) rounded once to float32 (see dpbf16).
func fmaF32(a, b, c float32) float32 {
	return ftz(float32(math.FMA(float64(a), float64(b), float64(c))))
}

// gemmBF16TGeneric is the scalar twin of the BF16 micro-kernels: it sets acc[r*width+t] to
// the sum, from zero and in order of the column pairs q < k2, of dpbf16 of row r's pair q
// (the dword at w[r*ldw+4q:], ldw in bytes) and token t's pair xp[q*width+t], for rows
// r < gemmRows and tokens t < width.
func gemmBF16TGeneric(width int, w []byte, ldw int, xp []uint32, k2 int, acc []float32) {
	for r := range gemmRows {
		row := w[r*ldw:][:4*k2]
		for t := range width {
			var s float32
			for q := range k2 {
				wq := uint32(row[4*q]) | uint32(row[4*q+1])<<8 | uint32(row[4*q+2])<<16 | uint32(row[4*q+3])<<24
				s = dpbf16(s, wq, xp[q*width+t])
			}
			acc[r*width+t] = s
		}
	}
}

// packTokensBF16 packs columns [c0, c1) (both even, or c1 = cols) of the activations x
// ([nTokens][cols], cols even) into dst as bfloat16 pairs by token groups: group g of width W
// starting at token t0 holds, at dst[off+q*W+t], x[t0+t][2q] rounded (low half) and
// x[t0+t][2q+1] rounded (high half); lanes past the last token zero.
func packTokensBF16(dst []uint32, x []float32, nTokens, cols, c0, c1 int) {
	off := 0
	for t0 := 0; t0 < nTokens; {
		wd := tokenGroupWidth(t0, nTokens)
		g := dst[off : off+wd*cols/2]
		nt := min(wd, nTokens-t0)
		for t := range nt {
			row := x[(t0+t)*cols:][:cols]
			for c := c0; c < c1; c += 2 {
				g[c/2*wd+t] = uint32(bf16RNE(row[c])) | uint32(bf16RNE(row[c+1]))<<16
			}
		}
		for c := c0; c < c1; c += 2 {
			clear(g[c/2*wd+nt : (c/2+1)*wd])
		}
		off += wd * cols / 2
		t0 += wd
	}
}

// multiplyPanelBF16 is multiplyPanel on the BF16 path: the panel's rows are read in place
// (the last panel's nr < gemmRows rows copied into the slot's panel first, the missing rows
// zero) and meet every token group's bfloat16 pairs.
func (s *gemmScratch) multiplyPanelBF16(sl *gemmSlot, r0, nr int) {
	rows, cols, n, rb := s.w.Rows, s.w.Cols, s.nTokens, s.rb
	pw := s.w.Data[r0*rb:]
	if nr < gemmRows {
		pw = f32Bytes(sl.panel)[:gemmRows*rb]
		clear(pw[copy(pw, s.w.Data[r0*rb:(r0+nr)*rb]):])
	}
	s.prefetchNext(r0)
	off := 0
	for t0 := 0; t0 < n; {
		wd := tokenGroupWidth(t0, n)
		if wd == gemmWide {
			s.tiles.bf16x16(pw, rb, s.xb[off:], cols/2, sl.tile)
		} else {
			s.tiles.bf16x8(pw, rb, s.xb[off:], cols/2, sl.tile)
		}
		storeTile(s.out[t0*rows+r0:], rows, sl.tile[:gemmRows*wd], wd, min(wd, n-t0), nr)
		off += wd * cols / 2
		t0 += wd
	}
}
