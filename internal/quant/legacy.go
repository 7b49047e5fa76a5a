package quant

import "encoding/binary"

// The legacy block types hold 32 elements per block. "Type-0" blocks (Q4_0, Q5_0, Q8_0) decode
// as d*q; "type-1" blocks (Q4_1, Q5_1) as d*q + m. The 4- and 5-bit types store element j in
// the low nibble of byte j and element j+16 in the high nibble; the fifth bits live in a
// little-endian uint32 qh, bit j for element j.
//
// Products are written float32(a*b) so that the compiler cannot fuse them with a following
// addition into an FMA: results must round exactly as GGML's C code rounds them.

// DequantizeBlockQ4_0 decodes one Q4_0 block {f16 d; u8 qs[16]}: y = d*(q-8).
func DequantizeBlockQ4_0(b *[18]byte, y *[32]float32) {
	d := getF16(b[0:])
	qs := b[2:18]
	for j := range 16 {
		y[j] = float32(int(qs[j]&0xf)-8) * d
		y[j+16] = float32(int(qs[j]>>4)-8) * d
	}
}

// DequantizeBlockQ4_1 decodes one Q4_1 block {f16 d; f16 m; u8 qs[16]}: y = d*q + m.
func DequantizeBlockQ4_1(b *[20]byte, y *[32]float32) {
	d := getF16(b[0:])
	m := getF16(b[2:])
	qs := b[4:20]
	for j := range 16 {
		y[j] = float32(float32(qs[j]&0xf)*d) + m
		y[j+16] = float32(float32(qs[j]>>4)*d) + m
	}
}

// DequantizeBlockQ5_0 decodes one Q5_0 block {f16 d; u8 qh[4]; u8 qs[16]}: y = d*(q-16).
func DequantizeBlockQ5_0(b *[22]byte, y *[32]float32) {
	d := getF16(b[0:])
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j := range 16 {
		h0 := byte(qh>>j) & 1 << 4
		h1 := byte(qh>>(j+16)) & 1 << 4
		y[j] = float32(int(qs[j]&0xf|h0)-16) * d
		y[j+16] = float32(int(qs[j]>>4|h1)-16) * d
	}
}

// DequantizeBlockQ5_1 decodes one Q5_1 block {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: y = d*q + m.
func DequantizeBlockQ5_1(b *[24]byte, y *[32]float32) {
	d := getF16(b[0:])
	m := getF16(b[2:])
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	for j := range 16 {
		h0 := byte(qh>>j) & 1 << 4
		h1 := byte(qh>>(j+16)) & 1 << 4
		y[j] = float32(float32(qs[j]&0xf|h0)*d) + m
		y[j+16] = float32(float32(qs[j]>>4|h1)*d) + m
	}
}

// DequantizeBlockQ8_0 decodes one Q8_0 block {f16 d; i8 qs[32]}: y = d*q.
func DequantizeBlockQ8_0(b *[34]byte, y *[32]float32) {
	d := getF16(b[0:])
	for j := range 32 {
		y[j] = float32(int8(b[2+j])) * d
	}
}

// DequantizeBlockQ8_1 decodes one Q8_1 block {f16 d; f16 s; i8 qs[32]}: y = d*q. The field s
// (d times the sum of the quants) is only used by dot-product kernels.
func DequantizeBlockQ8_1(b *[36]byte, y *[32]float32) {
	d := getF16(b[0:])
	for j := range 32 {
		y[j] = float32(int8(b[4+j])) * d
	}
}

// quantizeBlockQ4_0 encodes with d = m/-8, m the element of largest magnitude, so that m
// itself is exact (q = 0).
func quantizeBlockQ4_0(x *[32]float32, b *[18]byte) {
	mx, _ := absMax(x[:])
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b[0:], d)
	for j := range 16 {
		q0 := clampInt(truncInt(float32(x[j]*id)+8.5), 0, 15)
		q1 := clampInt(truncInt(float32(x[j+16]*id)+8.5), 0, 15)
		b[2+j] = byte(q0) | byte(q1)<<4
	}
}

// minMax returns the smallest and largest element of x.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x[1:] {
		lo = min(lo, v)
		hi = max(hi, v)
	}
	return lo, hi
}

// quantizeBlockQ4_1 encodes with m = min(x), d = (max-min)/15.
func quantizeBlockQ4_1(x *[32]float32, b *[20]byte) {
	lo, hi := minMax(x[:])
	d := (hi - lo) / 15
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b[0:], d)
	putF16(b[2:], lo)
	for j := range 16 {
		q0 := clampInt(truncInt(float32((x[j]-lo)*id)+0.5), 0, 15)
		q1 := clampInt(truncInt(float32((x[j+16]-lo)*id)+0.5), 0, 15)
		b[4+j] = byte(q0) | byte(q1)<<4
	}
}

// quantizeBlockQ5_0 encodes with d = m/-16, m the element of largest magnitude.
func quantizeBlockQ5_0(x *[32]float32, b *[22]byte) {
	mx, _ := absMax(x[:])
	d := mx / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b[0:], d)
	var qh uint32
	for j := range 16 {
		q0 := clampInt(truncInt(float32(x[j]*id)+16.5), 0, 31)
		q1 := clampInt(truncInt(float32(x[j+16]*id)+16.5), 0, 31)
		b[6+j] = byte(q0&0xf) | byte(q1&0xf)<<4
		qh |= uint32(q0>>4) << j
		qh |= uint32(q1>>4) << (j + 16)
	}
	binary.LittleEndian.PutUint32(b[2:], qh)
}

// quantizeBlockQ5_1 encodes with m = min(x), d = (max-min)/31.
func quantizeBlockQ5_1(x *[32]float32, b *[24]byte) {
	lo, hi := minMax(x[:])
	d := (hi - lo) / 31
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b[0:], d)
	putF16(b[2:], lo)
	var qh uint32
	for j := range 16 {
		q0 := clampInt(truncInt(float32((x[j]-lo)*id)+0.5), 0, 31)
		q1 := clampInt(truncInt(float32((x[j+16]-lo)*id)+0.5), 0, 31)
		b[8+j] = byte(q0&0xf) | byte(q1&0xf)<<4
		qh |= uint32(q0>>4) << j
		qh |= uint32(q1>>4) << (j + 16)
	}
	binary.LittleEndian.PutUint32(b[4:], qh)
}

// QuantizeBlockQ8_0 encodes 32 values as Q8_0 with d = max|x|/127 and q = round(x/d) (ties
// away from zero), as GGML's reference quantizer does. CPU kernels use it for activations.
func QuantizeBlockQ8_0(x *[32]float32, b *[34]byte) {
	_, amax := absMax(x[:])
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b[0:], d)
	for j := range 32 {
		b[2+j] = byte(int8(clampInt(roundAway(x[j]*id), -127, 127)))
	}
}

// QuantizeBlockQ8_1 encodes 32 values as Q8_1: like Q8_0, plus s = d*sum(q) for dot products
// against type-1 weights.
func QuantizeBlockQ8_1(x *[32]float32, b *[36]byte) {
	_, amax := absMax(x[:])
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b[0:], d)
	sum := 0
	for j := range 32 {
		q := clampInt(roundAway(x[j]*id), -127, 127)
		b[4+j] = byte(int8(q))
		sum += q
	}
	putF16(b[2:], float32(sum)*d)
}
