package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// dot4Case names one 4-row quantized dot kernel and the single-row kernel it must match.
type dot4Case struct {
	qc     quantCase
	kernel func(k *kernels) func(w []byte, stride int, x []byte, nb int, out []float32)
}

var dot4Cases = []dot4Case{
	{quantCases[0], func(k *kernels) func(w []byte, stride int, x []byte, nb int, out []float32) { return k.dot4Q8_0 }},
	{quantCases[1], func(k *kernels) func(w []byte, stride int, x []byte, nb int, out []float32) { return k.dot4Q4_0 }},
}

// checkDot4 runs every kernel set's 4-row kernel on 4 random rows (a padded stride apart)
// and compares each output with the generic single-row kernel: exactly under modeUnit.
func checkDot4(t *testing.T, c dot4Case, seed int64, nb, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	bb := c.qc.wt.BlockBytes()
	stride := nb*bb + r.Intn(3)*bb
	w := randWeights(r, c.qc.wt, (3*stride)/bb+nb, mode)
	x := randActivations(r, c.qc.xt, nb, mode)
	for _, k := range allKernels() {
		out := make([]float32, 4)
		c.kernel(k)(w, stride, x, nb, out)
		for i := range out {
			ref := dotGenericFor(c.qc)(w[i*stride:], x, nb)
			_, mag := oracleDot(t, c.qc.wt, c.qc.xt, w[i*stride:][:nb*bb], x, nb*c.qc.wt.BlockSize())
			if mode == modeUnit && mag < 1<<24 {
				if out[i] != ref {
					t.Fatalf("%s %s nb=%d row %d unit scales: got %v, generic %v (must be exact)", c.qc.name, k.name, nb, i, out[i], ref)
				}
				continue
			}
			if d := math.Abs(float64(out[i]) - float64(ref)); d > 1e-5*mag+1e-30 && !math.IsInf(mag, 0) {
				t.Fatalf("%s %s nb=%d mode=%d row %d: got %g, generic %g", c.qc.name, k.name, nb, mode, i, out[i], ref)
			}
		}
	}
}

// dotGenericFor returns the generic single-row kernel of c.
func dotGenericFor(c quantCase) func(w, x []byte, nb int) float32 { return c.kernel(genericKernels()) }

func TestDot4(t *testing.T) {
	for _, c := range dot4Cases {
		t.Run(c.qc.name, func(t *testing.T) {
			for _, nb := range []int{1, 2, 3, 8, 17, 64} {
				for mode := range numModes {
					checkDot4(t, c, int64(nb*10+mode), nb, mode)
				}
			}
		})
	}
}

func fuzzDot4(f *testing.F, c dot4Case) {
	f.Add(int64(1), uint8(1), uint8(modeRandom))
	f.Add(int64(2), uint8(5), uint8(modeExtreme))
	f.Add(int64(3), uint8(9), uint8(modeUnit))
	f.Fuzz(func(t *testing.T, seed int64, nb, mode uint8) {
		checkDot4(t, c, seed, int(nb%80)+1, int(mode%numModes))
	})
}

func FuzzDot4Q8_0(f *testing.F) { fuzzDot4(f, dot4Cases[0]) }
func FuzzDot4Q4_0(f *testing.F) { fuzzDot4(f, dot4Cases[1]) }

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
			}
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
