package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestDequantFP8 holds every kernel set's dequantFP8 to quant.Dequantize bit for bit, on
// rows holding every non-NaN byte (subnormals, zeros of both signs, ±448) and on row lengths
// around the 16-byte steps of the SIMD kernels.
func TestDequantFP8(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 8))
	var bytes []byte
	for b := range 256 {
		if b&0x7F != 0x7F {
			bytes = append(bytes, byte(b))
		}
	}
	for _, n := range []int{1, 15, 16, 17, 31, 254, 1000} {
		row := make([]byte, 4+n)
		bits := math.Float32bits(float32(r.Float64() * 0.01))
		row[0], row[1], row[2], row[3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		for i := range n {
			row[4+i] = bytes[(i+r.IntN(3))%len(bytes)]
		}
		want := make([]float32, n)
		if err := quant.Dequantize(quant.FP8, row, want); err != nil {
			t.Fatal(err)
		}
		for _, k := range allKernels() {
			got := make([]float32, n)
			k.dequantFP8(got, row)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: n=%d: element %d (byte %#x) is %v, want %v", k.name, n, i, row[4+i], got[i], want[i])
				}
			}
		}
	}
}
