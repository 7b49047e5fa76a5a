package cpu

import (
	"encoding/binary"
	"math"
)

// quantQ8_KFast quantizes len(src)/256 blocks into dst as Q8_K, bit for bit as
// quant.QuantizeBlockQ8_K (the test checks it), in float32 arithmetic: the rounding to
// nearest-even uses the 1.5*2^23 trick, exact for the magnitudes (<= 128) that are not
// clamped anyway.
func quantQ8_KFast(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := (*[256]float32)(src[256*b:])
		out := (*[q8KBytes]byte)(dst[q8KBytes*b:])
		var mx, amax float32
		for _, v := range x {
			a := v
			if a < 0 {
				a = -a
			}
			if a > amax {
				amax, mx = a, v
			}
		}
		if amax == 0 {
			clear(out[:])
			continue
		}
		iscale := -127 / mx
		const magic = 12582912 // 1.5 * 2^23
		for k := range 16 {
			var sum int
			for j := 16 * k; j < 16*k+16; j++ {
				v := iscale * x[j]
				q := 0
				if v == v { // NaN quantizes to 0; infinities clamp like large values
					q = int(max(-128, min(127, v+magic-magic)))
				}
				out[4+j] = byte(int8(q))
				sum += q
			}
			binary.LittleEndian.PutUint16(out[260+2*k:], uint16(int16(sum)))
		}
		binary.LittleEndian.PutUint32(out[0:], math.Float32bits(1/iscale))
	}
}
