package cpu

import (
	"encoding/binary"
	"math"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Block sizes in bytes of the formats the quantized kernels read.
const (
	q8_0Bytes = 34  // f16 d; int8 qs[32]
	q4_0Bytes = 18  // f16 d; uint8 qs[16]
	q4_1Bytes = 20  // f16 d, m; uint8 qs[16]
	q5_0Bytes = 22  // f16 d; uint8 qh[4]; uint8 qs[16]
	q5_1Bytes = 24  // f16 d, m; uint8 qh[4]; uint8 qs[16]
	q4KBytes  = 144 // f16 d, dmin; uint8 scales[12]; uint8 qs[128]
	q5KBytes  = 176 // f16 d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]
	q6KBytes  = 210 // uint8 ql[128], qh[64]; int8 scales[16]; f16 d
	q8KBytes  = 292 // f32 d; int8 qs[256]; int16 bsums[16]
)

func f16At(b []byte) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b)) }

func bf16At(b []byte) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
}

func dotF32Generic(w, x []float32) float32 {
	w = w[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += w[i] * x[i]
		s1 += w[i+1] * x[i+1]
		s2 += w[i+2] * x[i+2]
		s3 += w[i+3] * x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += w[i] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotF16Generic(w []byte, x []float32) float32 {
	w = w[:2*len(x)]
	var s float32
	for i, v := range x {
		s += f16At(w[2*i:]) * v
	}
	return s
}

func dotBF16Generic(w []byte, x []float32) float32 {
	w = w[:2*len(x)]
	var s float32
	for i, v := range x {
		s += bf16At(w[2*i:]) * v
	}
	return s
}

// dotQ8_0Generic is the reference dot product of a Q8_0 weight row with Q8_0 activations
// over nb blocks, and so the definition every Q8_0 kernel reproduces bit for bit: each
// block's exact int32 sum of products, times d_w*d_x (exact in float32: two f16 values),
// rounded, added in block order to a float32 sum (a separate multiply and add, no fused
// multiply-add).
func dotQ8_0Generic(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q8_0Bytes : (i+1)*q8_0Bytes]
		xb := x[i*q8_0Bytes : (i+1)*q8_0Bytes]
		var s int32
		for j := 2; j < q8_0Bytes; j++ {
			s += int32(int8(wb[j])) * int32(int8(xb[j]))
		}
		sum += float32(float32(s) * (f16At(wb) * f16At(xb)))
	}
	return sum
}

// dotQ4_0Generic is dotQ8_0Generic for Q4_0 weights (quant q-8 for nibble q), with the same
// arithmetic.
func dotQ4_0Generic(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q4_0Bytes : (i+1)*q4_0Bytes]
		xb := x[i*q8_0Bytes : (i+1)*q8_0Bytes]
		var s int32
		for j := range 16 {
			q := wb[2+j]
			s += (int32(q&15) - 8) * int32(int8(xb[2+j]))
			s += (int32(q>>4) - 8) * int32(int8(xb[2+16+j]))
		}
		sum += float32(float32(s) * (f16At(wb) * f16At(xb)))
	}
	return sum
}

// dotQ5_0Generic is dotQ8_0Generic for Q5_0 weights, with the same arithmetic: element j
// of a block has the 5-bit quant q whose low four bits are a nibble of qs (the low nibble
// of qs[j] for j < 16, the high nibble of qs[j-16] after) and whose fifth bit is bit j of
// qh, and stands for q-16.
func dotQ5_0Generic(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q5_0Bytes : (i+1)*q5_0Bytes]
		xb := x[i*q8_0Bytes : (i+1)*q8_0Bytes]
		qh := binary.LittleEndian.Uint32(wb[2:])
		var s int32
		for j := range 16 {
			q := wb[6+j]
			lo := int32(q&15|byte(qh>>j&1)<<4) - 16
			hi := int32(q>>4|byte(qh>>(j+16)&1)<<4) - 16
			s += lo*int32(int8(xb[2+j])) + hi*int32(int8(xb[18+j]))
		}
		sum += float32(float32(s) * (f16At(wb) * f16At(xb)))
	}
	return sum
}

// dotQ4_1Generic is dotQ5_1Generic for Q4_1 weights (the quant a nibble of qs, no qh).
func dotQ4_1Generic(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q4_1Bytes : (i+1)*q4_1Bytes]
		xb := x[i*q8_0Bytes : (i+1)*q8_0Bytes]
		var s, sx int32
		for j := range 16 {
			q := wb[4+j]
			x0, x1 := int32(int8(xb[2+j])), int32(int8(xb[18+j]))
			s += int32(q&15)*x0 + int32(q>>4)*x1
			sx += x0 + x1
		}
		dx := f16At(xb)
		sum += float32(float32(s)*(f16At(wb)*dx)) + float32(float32(sx)*(f16At(wb[2:])*dx))
	}
	return sum
}

// dotQ5_1Generic is the dot of Q5_1 weights (element j stands for d*q+m, q the 5-bit quant
// laid out as Q5_0's after the extra f16 m) with Q8_0 activations: per block the exact
// int32 sums of q*x and of x, times d_w*d_x and m_w*d_x, added to a float32 sum in block
// order.
func dotQ5_1Generic(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q5_1Bytes : (i+1)*q5_1Bytes]
		xb := x[i*q8_0Bytes : (i+1)*q8_0Bytes]
		qh := binary.LittleEndian.Uint32(wb[4:])
		var s, sx int32
		for j := range 16 {
			q := wb[8+j]
			lo, hi := int32(q&15|byte(qh>>j&1)<<4), int32(q>>4|byte(qh>>(j+16)&1)<<4)
			x0, x1 := int32(int8(xb[2+j])), int32(int8(xb[18+j]))
			s += lo*x0 + hi*x1
			sx += x0 + x1
		}
		dx := f16At(xb)
		sum += float32(float32(s)*(f16At(wb)*dx)) + float32(float32(sx)*(f16At(wb[2:])*dx))
	}
	return sum
}

// rows8Generic is the scalar twin of the 8-row kernels: out[i] = dot(w[i*stride:], x, nb)
// for i < 8.
func rows8Generic(dot func(w, x []byte, nb int) float32, w []byte, stride int, x []byte, nb int, out []float32) {
	out = out[:rows8]
	for i := range out {
		out[i] = dot(w[i*stride:], x, nb)
	}
}

func dotQ4KGeneric(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q4KBytes : (i+1)*q4KBytes]
		xb := x[i*q8KBytes : (i+1)*q8KBytes]
		dx := math.Float32frombits(binary.LittleEndian.Uint32(xb))
		scales := (*[12]byte)(wb[4:16])
		var sumi, summ int32
		for j := range 8 {
			sc, m := quant.ScaleMinK4(j, scales)
			qs := wb[16+32*(j/2) : 16+32*(j/2)+32]
			q8 := xb[4+32*j : 4+32*j+32]
			var s int32
			for l := range 32 {
				q := qs[l] & 15
				if j%2 == 1 {
					q = qs[l] >> 4
				}
				s += int32(q) * int32(int8(q8[l]))
			}
			sumi += int32(sc) * s
			bs := int32(int16(binary.LittleEndian.Uint16(xb[260+4*j:]))) +
				int32(int16(binary.LittleEndian.Uint16(xb[262+4*j:])))
			summ += int32(m) * bs
		}
		d := dx * f16At(wb[0:])
		dmin := dx * f16At(wb[2:])
		sum += d*float32(sumi) - dmin*float32(summ)
	}
	return sum
}

// dotQ5KGeneric is dotQ4KGeneric for Q5_K weights: the quant of element l of sub-block j
// has the nibble of Q4_K's layout (qs at byte 48 on) as its low four bits and bit j of
// qh[l] as its fifth.
func dotQ5KGeneric(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q5KBytes : (i+1)*q5KBytes]
		xb := x[i*q8KBytes : (i+1)*q8KBytes]
		dx := math.Float32frombits(binary.LittleEndian.Uint32(xb))
		scales := (*[12]byte)(wb[4:16])
		qh := wb[16:48]
		var sumi, summ int32
		for j := range 8 {
			sc, m := quant.ScaleMinK4(j, scales)
			qs := wb[48+32*(j/2) : 48+32*(j/2)+32]
			q8 := xb[4+32*j : 4+32*j+32]
			var s int32
			for l := range 32 {
				q := qs[l] & 15
				if j%2 == 1 {
					q = qs[l] >> 4
				}
				q |= (qh[l] >> j & 1) << 4
				s += int32(q) * int32(int8(q8[l]))
			}
			sumi += int32(sc) * s
			bs := int32(int16(binary.LittleEndian.Uint16(xb[260+4*j:]))) +
				int32(int16(binary.LittleEndian.Uint16(xb[262+4*j:])))
			summ += int32(m) * bs
		}
		d := dx * f16At(wb[0:])
		dmin := dx * f16At(wb[2:])
		sum += d*float32(sumi) - dmin*float32(summ)
	}
	return sum
}

func dotQ6KGeneric(w, x []byte, nb int) float32 {
	var sum float32
	for i := range nb {
		wb := w[i*q6KBytes : (i+1)*q6KBytes]
		xb := x[i*q8KBytes : (i+1)*q8KBytes]
		dx := math.Float32frombits(binary.LittleEndian.Uint32(xb))
		var q [256]int32
		for h := range 2 {
			ql := wb[64*h : 64*h+64]
			qh := wb[128+32*h : 128+32*h+32]
			y := q[128*h : 128*h+128]
			for l := range 32 {
				y[l] = int32(ql[l]&15|(qh[l]&3)<<4) - 32
				y[l+32] = int32(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
				y[l+64] = int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				y[l+96] = int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			}
		}
		var sumi int32
		for k := range 16 {
			var s int32
			for l := 16 * k; l < 16*k+16; l++ {
				s += q[l] * int32(int8(xb[4+l]))
			}
			sumi += int32(int8(wb[192+k])) * s
		}
		sum += dx * f16At(wb[208:]) * float32(sumi)
	}
	return sum
}

func axpyGeneric(y []float32, a float32, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

func cvtF16Generic(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = f16At(src[2*i:])
	}
}

func cvtBF16Generic(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = bf16At(src[2*i:])
	}
}

func attnScoresGeneric(sc, q, k []float32, stride int) {
	for j := range sc {
		sc[j] = dotF32Generic(k[j*stride:][:len(q)], q)
	}
}

func attnWsumGeneric(acc, e, v []float32, stride int) {
	for j, w := range e {
		axpyGeneric(acc, w, v[j*stride:][:len(acc)])
	}
}

// attnRowBuf is the head size up to which the F16 attention kernels widen a key or value
// row on the stack; longer rows are widened into an allocation.
const attnRowBuf = 256

// rowBuf returns n floats of buf, or a new slice when n exceeds it.
func rowBuf(buf *[attnRowBuf]float32, n int) []float32 {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]float32, n)
}

// attnScoresF16Generic widens each key row and takes attnScoresGeneric's dot product.
func attnScoresF16Generic(sc, q []float32, k []byte, stride int) {
	var buf [attnRowBuf]float32
	row := rowBuf(&buf, len(q))
	for j := range sc {
		cvtF16Generic(row, k[2*j*stride:])
		sc[j] = dotF32Generic(row, q)
	}
}

// attnWsumF16Generic widens each value row and adds it as attnWsumGeneric does.
func attnWsumF16Generic(acc, e []float32, v []byte, stride int) {
	var buf [attnRowBuf]float32
	row := rowBuf(&buf, len(acc))
	for j, w := range e {
		cvtF16Generic(row, v[2*j*stride:])
		axpyGeneric(acc, w, row)
	}
}

func quantQ8_0Generic(dst []byte, src []float32) {
	for i := range len(src) / 32 {
		quant.QuantizeBlockQ8_0((*[32]float32)(src[32*i:]), (*[34]byte)(dst[q8_0Bytes*i:]))
	}
}

// q4KScales computes the 8 sub-block scales d*scale_j and mins dmin*min_j of a Q4_K block,
// rounded as quant.DequantizeBlockQ4_K rounds them.
func q4KScales(b *[q4KBytes]byte, sc, mn *[8]float32) {
	d, dmin := f16At(b[0:]), f16At(b[2:])
	scales := (*[12]byte)(b[4:16])
	for j := range 8 {
		s, m := quant.ScaleMinK4(j, scales)
		sc[j], mn[j] = d*float32(s), dmin*float32(m)
	}
}

func dequantI8Generic(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g int) {
	n := groups * g
	for r := range rows {
		c, sc, d := src[r*stride:][:n], scales[r*sstride:][:groups], dst[r*n:][:n]
		for i, b := range c {
			d[i] = float32(int8(b)) * sc[i/g]
		}
	}
}

func dequantF8Generic(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g, shift int, mul float32) {
	n := groups * g
	for r := range rows {
		c, sc, d := src[r*stride:][:n], scales[r*sstride:][:groups], dst[r*n:][:n]
		for i, b := range c {
			bits := uint32(b&0x7f)<<shift | uint32(b&0x80)<<24
			d[i] = math.Float32frombits(bits) * mul * sc[i/g]
		}
	}
}
