package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// rows8Case names one 8-row kernel and its scalar reference.
type rows8Case struct {
	name   string
	wt     quant.Type
	kernel func(k *kernels) func(w []byte, stride int, x []byte, nb int, out []float32)
	ref    func(w, x []byte, nb int) float32
}

var rows8Cases = []rows8Case{
	{"Q8_0", quant.Q8_0, func(k *kernels) func(w []byte, stride int, x []byte, nb int, out []float32) { return k.rows8Q8_0 }, dotQ8_0Generic},
	{"Q4_0", quant.Q4_0, func(k *kernels) func(w []byte, stride int, x []byte, nb int, out []float32) { return k.rows8Q4_0 }, dotQ4_0Generic},
}

// oneRow turns an 8-row kernel into a single-row dot: the row taken 8 times (stride 0).
func oneRow(kernel func(w []byte, stride int, x []byte, nb int, out []float32)) func(w, x []byte, nb int) float32 {
	return func(w, x []byte, nb int) float32 {
		var out [rows8]float32
		kernel(w, 0, x, nb, out[:])
		return out[0]
	}
}

// sameBits reports whether a and b have the same bits, or are both NaN.
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// checkRows8 runs every kernel set's 8-row kernel on 8 random rows (a padded stride apart)
// and requires every output to equal the scalar reference bit for bit: the block sums are
// integers and the float steps are the same operations in the same order.
func checkRows8(t *testing.T, c rows8Case, seed int64, nb, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	bb := c.wt.BlockBytes()
	stride := nb*bb + r.Intn(3)*bb
	w := randWeights(r, c.wt, (rows8-1)*stride/bb+nb, mode)
	x := randActivations(r, quant.Q8_0, nb, mode)
	for _, k := range allKernels() {
		out := make([]float32, rows8)
		c.kernel(k)(w, stride, x, nb, out)
		for i := range out {
			if ref := c.ref(w[i*stride:], x, nb); !sameBits(out[i], ref) {
				t.Fatalf("%s %s nb=%d mode=%d row %d: got %v, reference %v (must be exact)", c.name, k.name, nb, mode, i, out[i], ref)
			}
		}
	}
}

func TestRows8(t *testing.T) {
	for _, c := range rows8Cases {
		t.Run(c.name, func(t *testing.T) {
			for _, nb := range []int{1, 2, 3, 8, 17, 64} {
				for mode := range numModes {
					checkRows8(t, c, int64(nb*10+mode), nb, mode)
				}
			}
		})
	}
}

// TestRows8Extremes drives every int16 stage of the kernels to its bound: all weight quants
// at -128 (Q8_0; |w| 128 unsigned) or nibble 0/15 (Q4_0), activations at +-127, unit scales.
func TestRows8Extremes(t *testing.T) {
	const nb = 4
	for _, c := range rows8Cases {
		for _, wq := range []byte{0x80, 0x7f, 0x00, 0xff, 0x0f, 0xf0} {
			for _, xq := range []int8{127, -127} {
				bb := c.wt.BlockBytes()
				w := make([]byte, rows8*nb*bb)
				x := make([]byte, nb*q8_0Bytes)
				for b := range rows8 * nb {
					w[b*bb], w[b*bb+1] = 0x00, 0x3c // f16 1.0
					for j := 2; j < bb; j++ {
						w[b*bb+j] = wq
					}
				}
				for b := range nb {
					x[b*q8_0Bytes], x[b*q8_0Bytes+1] = 0x00, 0x3c
					for j := 2; j < q8_0Bytes; j++ {
						x[b*q8_0Bytes+j] = byte(xq)
					}
				}
				for _, k := range allKernels() {
					out := make([]float32, rows8)
					c.kernel(k)(w, nb*bb, x, nb, out)
					for i := range out {
						if ref := c.ref(w[i*nb*bb:], x, nb); out[i] != ref {
							t.Fatalf("%s %s w=%#x x=%d row %d: got %v, reference %v", c.name, k.name, wq, xq, i, out[i], ref)
						}
					}
				}
			}
		}
	}
}

func fuzzRows8(f *testing.F, c rows8Case) {
	f.Add(int64(1), uint8(1), uint8(modeRandom))
	f.Add(int64(2), uint8(5), uint8(modeExtreme))
	f.Add(int64(3), uint8(9), uint8(modeUnit))
	f.Add(int64(4), uint8(64), uint8(modeRandom))
	f.Fuzz(func(t *testing.T, seed int64, nb, mode uint8) {
		checkRows8(t, c, seed, int(nb%80)+1, int(mode%numModes))
	})
}

func FuzzRows8Q8_0(f *testing.F) { fuzzRows8(f, rows8Cases[0]) }
func FuzzRows8Q4_0(f *testing.F) { fuzzRows8(f, rows8Cases[1]) }

// TestMatMulQ0BatchInvariance requires each token's outputs of a Q8_0 or Q4_0 product to
// be bit for bit the same whether the token is multiplied alone or in a batch, on every
// kernel set and thread count, with row counts that leave a partial panel.
func TestMatMulQ0BatchInvariance(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	pools := testPools(t, 1, 2)
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		for _, shape := range [][2]int{{8, 32}, {21, 96}, {64, 256}} {
			rows, cols := shape[0], shape[1]
			w, _ := randWeight(t, r, wt, rows, cols)
			const n = 33
			x := randFloats(r, n*cols, modeRandom)
			var first []float32
			for _, p := range pools {
				batch := make([]float32, n*rows)
				if err := MatMul(p, batch, w, x, n); err != nil {
					t.Fatal(err)
				}
				for tok := range n {
					alone := make([]float32, rows)
					if err := MatMul(p, alone, w, x[tok*cols:(tok+1)*cols], 1); err != nil {
						t.Fatal(err)
					}
					for i, v := range alone {
						if got := batch[tok*rows+i]; !sameBits(got, v) {
							t.Fatalf("%s %dx%d %s: token %d row %d: batch %v, alone %v", wt, rows, cols, p.KernelSet(), tok, i, got, v)
						}
					}
				}
				// Every kernel set gives the same bits too.
				if first == nil {
					first = batch
					continue
				}
				for i := range batch {
					if !sameBits(batch[i], first[i]) {
						t.Fatalf("%s %dx%d %s: out[%d] = %v, first kernel set %v", wt, rows, cols, p.KernelSet(), i, batch[i], first[i])
					}
				}
			}
		}
	}
}
