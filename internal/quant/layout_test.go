package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// Hand-built blocks decoded by Dequantize against values worked out by hand from GGML's block
// descriptions, so that a wrong layout is caught independently of the quantizers.

func putHalf(b []byte, v float32) { binary.LittleEndian.PutUint16(b, F32ToF16(v)) }

// decodeOne dequantizes one block of type t.
func decodeOne(t *testing.T, typ Type, block []byte) []float32 {
	t.Helper()
	y := make([]float32, typ.BlockSize())
	if err := Dequantize(typ, block, y); err != nil {
		t.Fatal(err)
	}
	return y
}

// checkValues compares y with the expected values at the given indices and with zero
// elsewhere (unless rest is non-nil, which gives the value of every other element).
func checkValues(t *testing.T, y []float32, want map[int]float32, rest func(i int) float32) {
	t.Helper()
	for i, v := range y {
		w, ok := want[i]
		if !ok {
			w = 0
			if rest != nil {
				w = rest(i)
			}
		}
		if v != w {
			t.Errorf("element %d = %g, want %g", i, v, w)
		}
	}
}

func TestHandBuiltLegacyBlocks(t *testing.T) {
	t.Run("Q4_0", func(t *testing.T) {
		b := make([]byte, 18)
		putHalf(b, 0.5)
		for j := range 16 {
			b[2+j] = 0x88 // both nibbles 8: value 0
		}
		b[2+0] = 0x1f  // y[0] = (15-8)*0.5, y[16] = (1-8)*0.5
		b[2+15] = 0x80 // y[15] = (0-8)*0.5, y[31] = 0
		checkValues(t, decodeOne(t, Q4_0, b), map[int]float32{0: 3.5, 16: -3.5, 15: -4}, nil)
	})
	t.Run("Q4_1", func(t *testing.T) {
		b := make([]byte, 20)
		putHalf(b[0:], 0.25)
		putHalf(b[2:], -1)
		b[4+3] = 0xa5 // y[3] = 5*0.25-1, y[19] = 10*0.25-1
		checkValues(t, decodeOne(t, Q4_1, b), map[int]float32{3: 0.25, 19: 1.5}, func(int) float32 { return -1 })
	})
	t.Run("Q5_0", func(t *testing.T) {
		b := make([]byte, 22)
		putHalf(b, 1)
		binary.LittleEndian.PutUint32(b[2:], 1<<2|1<<20)
		for j := range 16 {
			b[6+j] = 0x00 // value 0-16 unless a high bit is set
		}
		b[6+2] = 0x3f // y[2] = (0xf|16)-16 = 15, y[18] = (3|0)-16 = -13
		b[6+4] = 0x20 // y[4] = 0-16, y[20] = (2|16)-16 = 2
		checkValues(t, decodeOne(t, Q5_0, b), map[int]float32{2: 15, 18: -13, 20: 2}, func(int) float32 { return -16 })
	})
	t.Run("Q5_1", func(t *testing.T) {
		b := make([]byte, 24)
		putHalf(b[0:], 0.5)
		putHalf(b[2:], 2)
		binary.LittleEndian.PutUint32(b[4:], 1<<31|1<<0)
		b[8+15] = 0x70 // y[15] = 0*0.5+2, y[31] = (7|16)*0.5+2 = 13.5
		b[8+0] = 0x01  // y[0] = (1|16)*0.5+2 = 10.5, y[16] = 2
		checkValues(t, decodeOne(t, Q5_1, b), map[int]float32{31: 13.5, 0: 10.5}, func(int) float32 { return 2 })
	})
	t.Run("Q8_0", func(t *testing.T) {
		b := make([]byte, 34)
		putHalf(b, 0.125)
		b[2+5] = 0x80 // -128
		b[2+31] = 127
		checkValues(t, decodeOne(t, Q8_0, b), map[int]float32{5: -16, 31: 15.875}, nil)
	})
	t.Run("Q8_1", func(t *testing.T) {
		b := make([]byte, 36)
		putHalf(b[0:], 2)
		putHalf(b[2:], 1000) // s is not used for decoding
		b[4+0] = byte(0xfd)  // -3
		b[4+30] = 9
		checkValues(t, decodeOne(t, Q8_1, b), map[int]float32{0: -6, 30: 18}, nil)
	})
}

func TestScaleMinK4Literal(t *testing.T) {
	var s [12]byte
	s[0], s[4] = 2, 4            // sub-block 0: scale 2, min 4
	s[3], s[7] = 63|0x40, 1|0xc0 // sub-block 3: scale 63, min 1; top bits feed sub-block 7
	s[9] = 0xa5                  // sub-block 5: low nibbles scale 5, min 10
	s[1] = 0x80                  // sub-block 5: scale top bits 0b10 -> 37
	s[11] = 0x3c                 // sub-block 7: scale low 0xc, min low 3
	want := [8][2]uint8{{2, 4}, {0, 0}, {0, 0}, {63, 1}, {0, 0}, {37, 10}, {0, 0}, {0xc | 1<<4, 3 | 3<<4}}
	for j := range 8 {
		sc, m := ScaleMinK4(j, &s)
		if sc != want[j][0] || m != want[j][1] {
			t.Errorf("ScaleMinK4(%d) = %d, %d; want %d, %d", j, sc, m, want[j][0], want[j][1])
		}
	}
	// putScaleMinK4 must invert it for every value.
	r := rand.New(rand.NewPCG(1, 1))
	for range 1000 {
		var s [12]byte
		var vals [8][2]uint8
		for j := range 8 {
			vals[j] = [2]uint8{uint8(r.IntN(64)), uint8(r.IntN(64))}
			putScaleMinK4(j, vals[j][0], vals[j][1], &s)
		}
		for j := range 8 {
			if sc, m := ScaleMinK4(j, &s); sc != vals[j][0] || m != vals[j][1] {
				t.Fatalf("round trip of sub-block %d: got %d,%d want %v", j, sc, m, vals[j])
			}
		}
	}
}

func TestUnpackScalesQ3_KLiteral(t *testing.T) {
	var s [12]byte
	for i := 8; i < 12; i++ {
		s[i] = 0xaa // every high pair 0b10: biased 32 + low nibble
	}
	s[1] = 0x30  // sub-block 9 low nibble 3 -> +3
	s[0] = 0x0f  // sub-block 0 low nibble 15 -> +15
	s[8] = 0xa9  // sub-block 0 high pair 0b01 instead: 16+15-32 = -1
	s[11] = 0x2a // sub-block 15 high pair 0b00: 0-32 = -32 (bits 6-7 of byte 11)
	got := UnpackScalesQ3_K(&s)
	want := [16]int8{-1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, -32}
	if got != want {
		t.Errorf("UnpackScalesQ3_K = %v, want %v", got, want)
	}
}

func TestHandBuiltKBlocks(t *testing.T) {
	t.Run("Q2_K", func(t *testing.T) {
		b := make([]byte, 84)
		putHalf(b[80:], 1)
		putHalf(b[82:], 0.5)
		b[5] = 0x32  // sub-block 5 (elements 80-95): scale 2, min 3
		b[13] = 0x01 // sub-block 13 (elements 208-223): scale 1, min 0
		qs := b[16:80]
		qs[20] = 3 << 4    // element 84 = 64+20: bits 4-5 of qs[20]
		qs[32+17] = 2 << 4 // element 209 = 128+64+17
		want := map[int]float32{84: 1*2*3 - 0.5*3, 209: 2}
		checkValues(t, decodeOne(t, Q2_K, b), want, func(i int) float32 {
			if i >= 80 && i < 96 {
				return -1.5
			}
			return 0
		})
	})
	t.Run("Q3_K", func(t *testing.T) {
		b := make([]byte, 110)
		putHalf(b[108:], 0.5)
		s := b[96:108]
		for i := 8; i < 12; i++ {
			s[i] = 0xaa // all scales 0 ...
		}
		s[1] = 0x30 // ... but sub-block 9 (elements 144-159): +3
		hmask, qs := b[0:32], b[32:96]
		for l := range 32 {
			hmask[l] = 0xff // all high bits set: q = low bits
		}
		hmask[22] = 0xff             // element 150 = 128+22: high bit 4 set
		qs[32+22] = 2                // low bits 2 -> q = 2
		hmask[23] = 0xff &^ (1 << 4) // element 151: high bit clear, low 0 -> q = -4
		want := map[int]float32{150: 0.5 * 3 * 2, 151: 0.5 * 3 * -4}
		checkValues(t, decodeOne(t, Q3_K, b), want, nil)
	})
	t.Run("Q4_K", func(t *testing.T) {
		b := make([]byte, 144)
		putHalf(b[0:], 1)
		putHalf(b[2:], 0.25)
		s := b[4:16]
		s[0], s[4] = 2, 4 // sub-block 0: scale 2, min 4
		s[9] = 0xa5       // sub-block 5: scale 0b10_0101 = 37, min 10
		s[1] = 0x80
		qs := b[16:144]
		qs[1] = 0x0f    // element 1 (low nibble, sub-block 0): 2*15 - 0.25*4
		qs[64+3] = 0x70 // element 163 = 128+32+3 (high nibble, sub-block 5): 37*7 - 2.5
		want := map[int]float32{1: 29, 163: 256.5}
		checkValues(t, decodeOne(t, Q4_K, b), want, func(i int) float32 {
			switch i / 32 {
			case 0:
				return -1
			case 5:
				return -2.5
			}
			return 0
		})
	})
	t.Run("Q5_K", func(t *testing.T) {
		b := make([]byte, 176)
		putHalf(b[0:], 1)
		putHalf(b[2:], 0.25)
		s := b[4:16]
		s[0], s[4] = 2, 4
		s[9] = 0xa5
		s[1] = 0x80
		qh, qs := b[16:48], b[48:176]
		qs[1] = 0x0f
		qh[1] = 1 << 0 // element 1: fifth bit is bit 0 -> 31
		qs[64+3] = 0x70
		qh[3] = 1 << 5 // element 163 (pair 2, high half): bit 5 -> 23
		qh[7] = 1 << 6 // element 199 (pair 3, low half, sub-block 6 scale 0): 0
		want := map[int]float32{1: 2*31 - 1, 163: 37*23 - 2.5}
		checkValues(t, decodeOne(t, Q5_K, b), want, func(i int) float32 {
			switch i / 32 {
			case 0:
				return -1
			case 5:
				return -2.5
			}
			return 0
		})
	})
	t.Run("Q6_K", func(t *testing.T) {
		b := make([]byte, 210)
		putHalf(b[208:], 0.5)
		sc := b[192:208]
		sc[10] = byte(0xfd) // -3 for elements 160-175
		sc[14] = 1          // elements 224-239
		ql, qh := b[0:128], b[128:192]
		ql[64+32+5] = 0x3a // element 165 low nibble 0xa; element 229 high nibble 3
		qh[32+5] = 0x4c    // bits 2-3 = 3 (element 165), bits 6-7 = 1 (element 229)
		want := map[int]float32{165: 0.5 * -3 * (0x3a - 32), 229: 0.5 * 1 * (3 | 16 - 32)}
		checkValues(t, decodeOne(t, Q6_K, b), want, func(i int) float32 {
			switch i / 16 {
			case 10:
				return 0.5 * -3 * -32
			case 14:
				return 0.5 * -32
			}
			return 0
		})
	})
	t.Run("Q8_K", func(t *testing.T) {
		b := make([]byte, 292)
		binary.LittleEndian.PutUint32(b, math.Float32bits(0.25))
		b[4+200] = byte(0xf9) // -7
		b[4+0] = 100
		checkValues(t, decodeOne(t, Q8_K, b), map[int]float32{200: -1.75, 0: 25}, nil)
	})
}

// Per-element reference decoders written from GGML's descriptions by index arithmetic, for a
// differential test against the loop-structured block decoders on random blocks.
func refElement(typ Type, b []byte, i int) float32 {
	switch typ {
	case Q2_K:
		n, k, l := i/128, i%128/32, i%32
		q := (b[16+32*n+l] >> (2 * k)) & 3
		sc := b[i/16]
		d, dmin := getF16(b[80:]), getF16(b[82:])
		return float32(float32(d*float32(sc&15))*float32(q)) - float32(dmin*float32(sc>>4))
	case Q3_K:
		n, k, l := i/128, i%128/32, i%32
		q := int((b[32+32*n+l] >> (2 * k)) & 3)
		if (b[l]>>(4*n+k))&1 == 0 {
			q -= 4
		}
		j := i / 16
		var lo byte
		if j < 8 {
			lo = b[96+j] & 15
		} else {
			lo = b[96+j-8] >> 4
		}
		hi := (b[96+8+j%4] >> (2 * (j / 4))) & 3
		return float32(getF16(b[108:])*float32(int(lo|hi<<4)-32)) * float32(q)
	case Q4_K, Q5_K:
		p, half, l := i/64, i%64/32, i%32
		qsOff := 16
		if typ == Q5_K {
			qsOff = 48
		}
		q := b[qsOff+32*p+l]
		if half == 0 {
			q &= 15
		} else {
			q >>= 4
		}
		if typ == Q5_K && (b[16+l]>>(2*p+half))&1 == 1 {
			q += 16
		}
		sc, m := ScaleMinK4(i/32, (*[12]byte)(b[4:16]))
		return float32(float32(getF16(b[0:])*float32(sc))*float32(q)) - float32(getF16(b[2:])*float32(m))
	case Q6_K:
		n, g, l := i/128, i%128/32, i%32
		lb := b[64*n+32*(g%2)+l]
		if g >= 2 {
			lb >>= 4
		}
		hb := (b[128+32*n+l] >> (2 * g)) & 3
		q := int(lb&15|hb<<4) - 32
		return float32(getF16(b[208:])*float32(int8(b[192+i/16]))) * float32(q)
	}
	panic("no reference for " + typ.String())
}

func TestKBlocksMatchElementReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	halfOffsets := map[Type][]int{Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}}
	for _, typ := range []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K} {
		for range 200 {
			b := make([]byte, typ.BlockBytes())
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			for _, off := range halfOffsets[typ] {
				putHalf(b[off:], float32(r.NormFloat64()))
			}
			y := decodeOne(t, typ, b)
			for i, v := range y {
				if want := refElement(typ, b, i); v != want {
					t.Fatalf("%s element %d = %g, reference %g", typ, i, v, want)
				}
			}
		}
	}
}
