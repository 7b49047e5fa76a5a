package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDequantize feeds arbitrary bytes to the dequantizer of every supported type: it must
// never panic and must fill the whole output (NaN and infinities are fine).
func FuzzDequantize(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 292))
	f.Add([]byte{0xff, 0x7b, 0x01, 0x80, 0x7c, 0x00, 0xfc, 0xff, 0x7e, 0x00})
	full := make([]byte, 2*292)
	for i := range full {
		full[i] = byte(i * 37)
	}
	f.Add(full)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range supportedTypes {
			bb := typ.BlockBytes()
			nblocks := len(data) / bb
			src := data[:nblocks*bb]
			dst := make([]float32, nblocks*typ.BlockSize()+1)
			dst[len(dst)-1] = 12345 // sentinel just past the decoded range
			if err := Dequantize(typ, src, dst[:len(dst)-1]); err != nil {
				t.Fatalf("%s: %d whole blocks: %v", typ, nblocks, err)
			}
			if dst[len(dst)-1] != 12345 {
				t.Fatalf("%s: wrote past the end of dst", typ)
			}
			// A wrong length must be an error, not a panic.
			if len(data) > 0 && len(data)%bb != 0 {
				if err := Dequantize(typ, data, dst[:nblocks*typ.BlockSize()]); err == nil {
					t.Fatalf("%s: %d bytes accepted for %d blocks", typ, len(data), nblocks)
				}
			}
		}
	})
}

// FuzzQuantize feeds arbitrary float32 bit patterns (NaN, infinities, subnormals included) to
// every quantizer: it must never panic, and finite input within range must round-trip within
// the error bound.
func FuzzQuantize(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	seed := make([]byte, 4*256)
	for i := range 256 {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(float32(i%17)-8))
	}
	f.Add(seed, uint16(3))
	nan := make([]byte, 4*32)
	binary.LittleEndian.PutUint32(nan[8:], 0x7fc00000)
	binary.LittleEndian.PutUint32(nan[12:], 0x7f800000)
	f.Add(nan, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, scaleExp uint16) {
		n := len(data) / 4 / 256 * 256
		if n == 0 && len(data) >= 4*32 {
			n = 256 // repeat short input to fill one super-block
		}
		x := make([]float32, n)
		for i := range x {
			j := 4 * i % (len(data) &^ 3)
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[j:]))
		}
		// Optionally squash into a moderate range so that round trips can be checked.
		if scaleExp%2 == 1 {
			for i, v := range x {
				if v != v || math.IsInf(float64(v), 0) {
					x[i] = 0
					continue
				}
				m, _ := math.Frexp(float64(v))
				x[i] = float32(math.Ldexp(m, int(scaleExp>>1)%20-10))
			}
		}
		for _, typ := range supportedTypes {
			nb, err := typ.RowBytes(len(x))
			if err != nil {
				t.Fatal(err)
			}
			q := make([]byte, nb)
			if err := Quantize(typ, x, q); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			y := make([]float32, len(x))
			if err := Dequantize(typ, q, y); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			bs := typ.BlockSize()
			for b := 0; b < len(x); b += bs {
				bound, _ := ErrorBound(typ, x[b:b+bs])
				for i := b; i < b+bs; i++ {
					if e := math.Abs(float64(x[i]) - float64(y[i])); e > bound {
						t.Fatalf("%s: element %d: %g decodes as %g, error %g above %g", typ, i, x[i], y[i], e, bound)
					}
				}
			}
		}
	})
}
