package quant

import (
	"encoding/binary"
	"math"
)

// The k-quants pack 256 elements into a super-block holding sub-block scales (and, for the
// "type-1" kinds Q2_K, Q4_K, Q5_K, sub-block mins) that are themselves quantized against one
// or two f16 super-block scales. The element order inside a block follows GGML's
// dequantize_row_* functions exactly; see each function's comment.
//
// As in legacy.go, products are written float32(a*b) so that no FMA fusion changes rounding.

// ScaleMinK4 returns the 6-bit scale and 6-bit min of sub-block j (0 <= j < 8) from the 12
// packed scale bytes of a Q4_K or Q5_K block (GGML's get_scale_min_k4). Sub-blocks 0-3 keep
// their scale and min in the low 6 bits of bytes j and j+4; sub-blocks 4-7 keep the low 4 bits
// in byte j+4 (scale low nibble, min high nibble) and their top 2 bits in the top bits of
// bytes j-4 (scale) and j (min).
func ScaleMinK4(j int, s *[12]byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	sc = s[j+4]&0xf | (s[j-4]>>6)<<4
	m = s[j+4]>>4 | (s[j]>>6)<<4
	return sc, m
}

// putScaleMinK4 stores the 6-bit scale and min of sub-block j; the inverse of ScaleMinK4. The
// 12 bytes must start zeroed.
func putScaleMinK4(j int, sc, m uint8, s *[12]byte) {
	if j < 4 {
		s[j] |= sc & 63
		s[j+4] |= m & 63
		return
	}
	s[j+4] |= sc&0xf | (m&0xf)<<4
	s[j-4] |= (sc >> 4) << 6
	s[j] |= (m >> 4) << 6
}

// UnpackScalesQ3_K returns the 16 signed sub-block scales of a Q3_K block from its 12 packed
// scale bytes. Each scale is 6 bits biased by 32: the low 4 bits are the low nibble of byte j
// (j < 8) or the high nibble of byte j-8, the high 2 bits are bits 2*(j/4) of byte 8 + j%4.
func UnpackScalesQ3_K(s *[12]byte) [16]int8 {
	var out [16]int8
	for j := range 16 {
		var lo byte
		if j < 8 {
			lo = s[j] & 0xf
		} else {
			lo = s[j-8] >> 4
		}
		hi := (s[8+j%4] >> (2 * (j / 4))) & 3
		out[j] = int8(lo|hi<<4) - 32
	}
	return out
}

// DequantizeBlockQ2_K decodes one Q2_K block {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}.
// Byte scales[i] holds sub-block i's scale (low nibble) and min (high nibble); element
// 128*n + 32*k + l takes bits 2k..2k+1 of qs[32*n + l] and sub-block 8*n + 2*k + l/16:
// y = d*scale*q - dmin*min.
func DequantizeBlockQ2_K(b *[84]byte, y *[256]float32) {
	d := getF16(b[80:])
	dmin := getF16(b[82:])
	scales := b[0:16]
	for n := range 2 {
		q := b[16+32*n : 48+32*n]
		for k := range 4 {
			shift := 2 * k
			for h := range 2 {
				sc := scales[8*n+2*k+h]
				dl := float32(d * float32(sc&0xf))
				ml := float32(dmin * float32(sc>>4))
				for l := range 16 {
					v := (q[16*h+l] >> shift) & 3
					y[128*n+32*k+16*h+l] = float32(dl*float32(v)) - ml
				}
			}
		}
	}
}

// DequantizeBlockQ3_K decodes one Q3_K block {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}.
// Element 128*n + 32*k + l takes its low 2 bits from bits 2k..2k+1 of qs[32*n + l] and its
// high bit from bit 4*n + k of hmask[l]; a clear high bit subtracts 4:
// y = d*scale*(q - 4*(1-h)), scale from UnpackScalesQ3_K for sub-block 8*n + 2*k + l/16.
func DequantizeBlockQ3_K(b *[110]byte, y *[256]float32) {
	dAll := getF16(b[108:])
	scales := UnpackScalesQ3_K((*[12]byte)(b[96:108]))
	hmask := b[0:32]
	m := byte(1)
	for n := range 2 {
		q := b[32+32*n : 64+32*n]
		for k := range 4 {
			shift := 2 * k
			for h := range 2 {
				dl := float32(dAll * float32(scales[8*n+2*k+h]))
				for l := range 16 {
					i := 16*h + l
					v := int((q[i] >> shift) & 3)
					if hmask[i]&m == 0 {
						v -= 4
					}
					y[128*n+32*k+i] = dl * float32(v)
				}
			}
			m <<= 1
		}
	}
}

// DequantizeBlockQ4_K decodes one Q4_K block {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}.
// Elements 64*p + l (l < 32) are the low nibbles of qs[32*p + l] in sub-block 2p, elements
// 64*p + 32 + l the high nibbles in sub-block 2p+1: y = d*scale*q - dmin*min (ScaleMinK4).
func DequantizeBlockQ4_K(b *[144]byte, y *[256]float32) {
	d := getF16(b[0:])
	dmin := getF16(b[2:])
	scales := (*[12]byte)(b[4:16])
	for p := range 4 {
		sc1, m1 := ScaleMinK4(2*p, scales)
		sc2, m2 := ScaleMinK4(2*p+1, scales)
		d1, min1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
		d2, min2 := float32(d*float32(sc2)), float32(dmin*float32(m2))
		q := b[16+32*p : 48+32*p]
		for l := range 32 {
			y[64*p+l] = float32(d1*float32(q[l]&0xf)) - min1
			y[64*p+32+l] = float32(d2*float32(q[l]>>4)) - min2
		}
	}
}

// DequantizeBlockQ5_K decodes one Q5_K block {f16 d; f16 dmin; u8 scales[12]; u8 qh[32];
// u8 qs[128]}. It is Q4_K with a fifth bit: element 64*p + l takes bit 2p of qh[l], element
// 64*p + 32 + l bit 2p+1 of qh[l].
func DequantizeBlockQ5_K(b *[176]byte, y *[256]float32) {
	d := getF16(b[0:])
	dmin := getF16(b[2:])
	scales := (*[12]byte)(b[4:16])
	qh := b[16:48]
	for p := range 4 {
		sc1, m1 := ScaleMinK4(2*p, scales)
		sc2, m2 := ScaleMinK4(2*p+1, scales)
		d1, min1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
		d2, min2 := float32(d*float32(sc2)), float32(dmin*float32(m2))
		q := b[48+32*p : 80+32*p]
		u1, u2 := byte(1)<<(2*p), byte(2)<<(2*p)
		for l := range 32 {
			v1, v2 := q[l]&0xf, q[l]>>4
			if qh[l]&u1 != 0 {
				v1 += 16
			}
			if qh[l]&u2 != 0 {
				v2 += 16
			}
			y[64*p+l] = float32(d1*float32(v1)) - min1
			y[64*p+32+l] = float32(d2*float32(v2)) - min2
		}
	}
}

// DequantizeBlockQ6_K decodes one Q6_K block {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}.
// In half n (128 elements), for l < 32: element +l is the low nibble of ql[64n+l], +32+l the
// low nibble of ql[64n+32+l], +64+l the high nibble of ql[64n+l], +96+l the high nibble of
// ql[64n+32+l]; their top 2 bits are bits 0-1, 2-3, 4-5, 6-7 of qh[32n+l]. Element i of the
// block uses scales[i/16]: y = d*scale*(q-32).
func DequantizeBlockQ6_K(b *[210]byte, y *[256]float32) {
	d := getF16(b[208:])
	for n := range 2 {
		ql := b[64*n : 64*n+64]
		qh := b[128+32*n : 160+32*n]
		sc := b[192+8*n : 200+8*n]
		for l := range 32 {
			is := l / 16
			h := qh[l]
			q1 := int(ql[l]&0xf|(h&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|((h>>2)&3)<<4) - 32
			q3 := int(ql[l]>>4|((h>>4)&3)<<4) - 32
			q4 := int(ql[l+32]>>4|((h>>6)&3)<<4) - 32
			y[128*n+l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[128*n+32+l] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[128*n+64+l] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[128*n+96+l] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}

// DequantizeBlockQ8_K decodes one Q8_K block {f32 d; i8 qs[256]; i16 bsums[16]}: y = d*q. The
// bsums (sums of each 16 quants) are only used by dot-product kernels.
func DequantizeBlockQ8_K(b *[292]byte, y *[256]float32) {
	d := math.Float32frombits(binary.LittleEndian.Uint32(b[0:]))
	for j := range 256 {
		y[j] = d * float32(int8(b[4+j]))
	}
}

// QuantizeBlockQ8_K encodes 256 values as Q8_K (the activation format paired with k-quant
// weights): d = m/-127 with m the element of largest magnitude, q = nearest(x/d) capped at
// 127, and bsums the sums of each run of 16 quants. An all-zero block encodes as all zeros.
func QuantizeBlockQ8_K(x *[256]float32, b *[292]byte) {
	clear(b[:])
	mx, amax := absMax(x[:])
	if amax == 0 {
		return
	}
	iscale := -127 / mx
	for j := range 256 {
		q := clampInt(nearestInt(iscale*x[j]), -128, 127)
		b[4+j] = byte(int8(q))
	}
	for k := range 16 {
		sum := 0
		for _, q := range b[4+16*k : 20+16*k] {
			sum += int(int8(q))
		}
		binary.LittleEndian.PutUint16(b[260+2*k:], uint16(int16(sum)))
	}
	binary.LittleEndian.PutUint32(b[0:], math.Float32bits(1/iscale))
}
