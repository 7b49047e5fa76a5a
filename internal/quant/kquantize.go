package quant

import "math"

// Reference k-quant quantizers. Each searches sub-block scales (and mins) with the helpers in
// ksearch.go, quantizes those against f16 super-block scales, then re-derives every element's
// integer from the scales the block will actually decode with.

// quantizeBlockQ2_K encodes 256 values as Q2_K: 16 sub-blocks of 16, 2-bit quants, 4-bit
// scales and mins.
func quantizeBlockQ2_K(x *[256]float32, b *[84]byte) {
	clear(b[:])
	var L [256]uint8
	var weights [16]float32
	var lauxq [16]uint8
	var scales, mins [16]float32
	var maxScale, maxMin float32
	params := qkx2Params{rmin: -0.5, rdelta: 0.1, nstep: 15, useMAD: true}
	for j := range 16 {
		sub := x[16*j : 16*j+16]
		for l, v := range sub {
			weights[l] = float32(math.Abs(float64(v)))
		}
		scales[j], mins[j] = makeQKX2Quants(sub, weights[:], 3, L[16*j:16*j+16], lauxq[:], params)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	const q4scale = 15
	if maxScale > 0 {
		iscale := q4scale / maxScale
		for j := range 16 {
			b[j] = uint8(clampInt(nearestInt(iscale*scales[j]), 0, 15))
		}
		putF16(b[80:], maxScale/q4scale)
	}
	if maxMin > 0 {
		iscale := q4scale / maxMin
		for j := range 16 {
			b[j] |= uint8(clampInt(nearestInt(iscale*mins[j]), 0, 15)) << 4
		}
		putF16(b[82:], maxMin/q4scale)
	}
	d16, dmin16 := getF16(b[80:]), getF16(b[82:])
	for j := range 16 {
		d := d16 * float32(b[j]&0xf)
		if d == 0 {
			continue
		}
		dm := dmin16 * float32(b[j]>>4)
		for i := 16 * j; i < 16*j+16; i++ {
			L[i] = uint8(clampInt(nearestInt((x[i]+dm)/d), 0, 3))
		}
	}
	for n := range 2 {
		for l := range 32 {
			i := 128*n + l
			b[16+32*n+l] = L[i] | L[i+32]<<2 | L[i+64]<<4 | L[i+96]<<6
		}
	}
}

// quantizeBlockQ3_K encodes 256 values as Q3_K: 16 sub-blocks of 16, 3-bit quants, 6-bit
// signed scales.
func quantizeBlockQ3_K(x *[256]float32, b *[110]byte) {
	clear(b[:])
	var L [256]uint8
	var scales [16]float32
	var maxScale, amax float32
	for j := range 16 {
		scales[j] = makeQ3Quants(x[16*j:16*j+16], 4, L[16*j:16*j+16])
		if a := float32(math.Abs(float64(scales[j]))); a > amax {
			amax, maxScale = a, scales[j]
		}
	}
	s := (*[12]byte)(b[96:108])
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := range 16 {
			l := byte(clampInt(nearestInt(iscale*scales[j]), -32, 31) + 32)
			if j < 8 {
				s[j] = l & 0xf
			} else {
				s[j-8] |= (l & 0xf) << 4
			}
			s[8+j%4] |= (l >> 4) << (2 * (j / 4))
		}
		putF16(b[108:], 1/iscale)
	}
	d16 := getF16(b[108:])
	sc := UnpackScalesQ3_K(s)
	for j := range 16 {
		d := d16 * float32(sc[j])
		if d == 0 {
			continue
		}
		for i := 16 * j; i < 16*j+16; i++ {
			L[i] = uint8(clampInt(nearestInt(x[i]/d), -4, 3) + 4)
		}
	}
	hmask := b[0:32]
	for i := range 256 {
		if L[i] > 3 {
			hmask[i%32] |= 1 << (i / 32)
			L[i] -= 4
		}
	}
	for n := range 2 {
		for l := range 32 {
			i := 128*n + l
			b[32+32*n+l] = L[i] | L[i+32]<<2 | L[i+64]<<4 | L[i+96]<<6
		}
	}
}

// quantizeScalesMinsK4 searches the eight sub-blocks of 32 of a Q4_K/Q5_K block with nmax
// levels, stores the 6-bit scales and mins and the f16 super-block scales into hdr (d, dmin,
// scales[12]), and returns the per-element integers in L. With imp (an importance weight
// per element, or nil) each element's error is weighed imp*sqrt(sigma2 + x^2), sigma2 the
// block's mean square times 2, as llama.cpp weighs it with an importance matrix; without,
// by the sub-block's RMS plus |x|.
func quantizeScalesMinsK4(x *[256]float32, imp *[256]float32, nmax int, p qkx2Params, hdr *[16]byte, L *[256]uint8) {
	var sigma2 float32
	if imp != nil {
		for _, v := range x {
			sigma2 += v * v
		}
		sigma2 = 2 * sigma2 / 256
	}
	var weights [32]float32
	var laux [32]uint8
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		sub := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range sub {
			sumX2 += v * v
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range sub {
			if imp != nil {
				weights[l] = imp[32*j+l] * float32(math.Sqrt(float64(sigma2+v*v)))
			} else {
				weights[l] = avX + float32(math.Abs(float64(v)))
			}
		}
		scales[j], mins[j] = makeQKX2Quants(sub, weights[:], nmax, L[32*j:32*j+32], laux[:], p)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	s := (*[12]byte)(hdr[4:16])
	for j := range 8 {
		ls := uint8(clampInt(nearestInt(invScale*scales[j]), 0, 63))
		lm := uint8(clampInt(nearestInt(invMin*mins[j]), 0, 63))
		putScaleMinK4(j, ls, lm, s)
	}
	putF16(hdr[0:], maxScale/63)
	putF16(hdr[2:], maxMin/63)
	d16, dmin16 := getF16(hdr[0:]), getF16(hdr[2:])
	for j := range 8 {
		sc, m := ScaleMinK4(j, s)
		d := d16 * float32(sc)
		if d == 0 {
			continue
		}
		dm := dmin16 * float32(m)
		for i := 32 * j; i < 32*j+32; i++ {
			L[i] = uint8(clampInt(nearestInt((x[i]+dm)/d), 0, nmax))
		}
	}
}

// quantizeBlockQ4_K encodes 256 values as Q4_K: 8 sub-blocks of 32, 4-bit quants, 6-bit
// scales and mins.
func quantizeBlockQ4_K(x *[256]float32, b *[144]byte) { quantizeBlockQ4_KWeighted(x, nil, b) }

// quantizeBlockQ4_KWeighted is quantizeBlockQ4_K with importance weights (nil for none).
func quantizeBlockQ4_KWeighted(x, imp *[256]float32, b *[144]byte) {
	clear(b[:])
	var L [256]uint8
	quantizeScalesMinsK4(x, imp, 15, qkx2Params{rmin: -1, rdelta: 0.1, nstep: 20}, (*[16]byte)(b[0:16]), &L)
	packQ4_K(&L, b)
}

// packQ4_K writes the 4-bit quants L (0..15) of a Q4_K block after its header.
func packQ4_K(L *[256]uint8, b *[144]byte) {
	for p := range 4 {
		for l := range 32 {
			b[16+32*p+l] = L[64*p+l] | L[64*p+32+l]<<4
		}
	}
}

// quantizeBlockQ5_K encodes 256 values as Q5_K: 8 sub-blocks of 32, 5-bit quants, 6-bit
// scales and mins.
func quantizeBlockQ5_K(x *[256]float32, b *[176]byte) { quantizeBlockQ5_KWeighted(x, nil, b) }

// quantizeBlockQ5_KWeighted is quantizeBlockQ5_K with importance weights (nil for none).
func quantizeBlockQ5_KWeighted(x, imp *[256]float32, b *[176]byte) {
	clear(b[:])
	var L [256]uint8
	quantizeScalesMinsK4(x, imp, 31, qkx2Params{rmin: -0.5, rdelta: 0.1, nstep: 15}, (*[16]byte)(b[0:16]), &L)
	packQ5_K(&L, b)
}

// packQ5_K writes the 5-bit quants L (0..31) of a Q5_K block after its header.
func packQ5_K(L *[256]uint8, b *[176]byte) {
	qh := b[16:48]
	clear(qh)
	for p := range 4 {
		for l := range 32 {
			l1, l2 := L[64*p+l], L[64*p+32+l]
			if l1 > 15 {
				l1 -= 16
				qh[l] |= 1 << (2 * p)
			}
			if l2 > 15 {
				l2 -= 16
				qh[l] |= 2 << (2 * p)
			}
			b[48+32*p+l] = l1 | l2<<4
		}
	}
}

// quantizeBlockQ6_K encodes 256 values as Q6_K: 16 sub-blocks of 16, 6-bit quants, 8-bit
// signed scales.
func quantizeBlockQ6_K(x *[256]float32, b *[210]byte) {
	clear(b[:])
	var L [256]uint8
	var scales [16]float32
	var maxScale, maxAbs float32
	for j := range 16 {
		scales[j] = makeQXQuants(x[16*j:16*j+16], 32, L[16*j:16*j+16])
		if a := float32(math.Abs(float64(scales[j]))); a > maxAbs {
			maxAbs, maxScale = a, scales[j]
		}
	}
	if maxAbs < groupMaxEps {
		return
	}
	iscale := -128 / maxScale
	putF16(b[208:], 1/iscale)
	for j := range 16 {
		b[192+j] = byte(int8(clampInt(nearestInt(iscale*scales[j]), -128, 127)))
	}
	d16 := getF16(b[208:])
	for j := range 16 {
		d := d16 * float32(int8(b[192+j]))
		if d == 0 {
			continue
		}
		for i := 16 * j; i < 16*j+16; i++ {
			L[i] = uint8(clampInt(nearestInt(x[i]/d), -32, 31) + 32)
		}
	}
	packQ6_K(&L, b)
}

// packQ6_K writes the 6-bit quants L (0..63) of a Q6_K block before its scales.
func packQ6_K(L *[256]uint8, b *[210]byte) {
	for n := range 2 {
		for l := range 32 {
			i := 128*n + l
			b[64*n+l] = L[i]&0xf | (L[i+64]&0xf)<<4
			b[64*n+32+l] = L[i+32]&0xf | (L[i+96]&0xf)<<4
			b[128+32*n+l] = L[i]>>4 | (L[i+32]>>4)<<2 | (L[i+64]>>4)<<4 | (L[i+96]>>4)<<6
		}
	}
}
