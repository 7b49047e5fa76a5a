package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// gemv4Kernel returns the 4-row float kernel of k for weight type index i of floatCases.
func gemv4Kernel(k *kernels, i int) func(w []byte, stride int, x, out []float32) {
	return []func(w []byte, stride int, x, out []float32){k.gemv4F32, k.gemv4F16, k.gemv4BF16}[i]
}

// checkGemv4 runs every kernel set's 4-row float kernels on 4 random rows of n values (a
// padded stride apart) and compares each output with the generic single-row dot.
func checkGemv4(t *testing.T, seed int64, n, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	for ci, c := range floatCases {
		es := c.wt.BlockBytes()
		stride := n*es + r.Intn(3)*es
		wf := randFloats(r, 3*stride/es+n, mode)
		w := make([]byte, len(wf)*es)
		if err := quant.Quantize(c.wt, wf, w); err != nil {
			t.Fatal(err)
		}
		x := randFloats(r, n, mode)
		results := make([]map[string]float32, 4)
		for _, k := range allKernels() {
			out := make([]float32, 4)
			gemv4Kernel(k, ci)(w, stride, x, out)
			for i := range out {
				row := w[i*stride:][:n*es]
				ref := c.dot(genericKernels(), row, x)
				_, mag := oracleDot(t, c.wt, quant.F32, row, f32Bytes(x), n)
				if d := math.Abs(float64(out[i]) - float64(ref)); d > 1e-5*mag+1e-30 {
					t.Fatalf("%s %s n=%d mode=%d row %d: got %g, generic %g", c.name, k.name, n, mode, i, out[i], ref)
				}
				if results[i] == nil {
					results[i] = map[string]float32{}
				}
				results[i][k.name] = out[i]
			}
		}
		for i, res := range results {
			checkBitTwins(t, fmt.Sprintf("%s n=%d mode=%d row %d", c.name, n, mode, i), res)
		}
	}
}

func TestGemv4(t *testing.T) {
	for _, n := range []int{1, 8, 31, 32, 33, 64, 100, 2048} {
		for mode := range numModes {
			checkGemv4(t, int64(n*10+mode), n, mode)
		}
	}
}

func FuzzGemv4(f *testing.F) {
	f.Add(int64(1), uint16(32), uint8(modeRandom))
	f.Add(int64(2), uint16(77), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, n uint16, mode uint8) {
		checkGemv4(t, seed, int(n%4096)+1, int(mode%numModes))
	})
}
