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

// gemv4MultiKernel returns the multi-token float kernel of k for weight type index i of
// floatCases.
func gemv4MultiKernel(k *kernels, i int) gemv4MultiFunc {
	return []gemv4MultiFunc{k.gemv4F32Multi, k.gemv4F16Multi, k.gemv4BF16Multi}[i]
}

// checkGemv4Multi runs every set's multi-token float kernels on 4 random rows of n values
// with 2..maxMultiTokens tokens, padded strides of weights, activations and outputs, and
// requires each token's outputs to be bit for bit those of the set's one-token kernel, and
// near the generic single-row dot (the pure-Go twin).
func checkGemv4Multi(t *testing.T, seed int64, n, mode int) {
	t.Helper()
	for ci, c := range floatCases {
		r := rand.New(rand.NewSource(seed))
		es := c.wt.BlockBytes()
		stride := n*es + r.Intn(3)*es
		w := make([]byte, 3*stride+n*es)
		if err := quant.Quantize(c.wt, randFloats(r, len(w)/es, mode), w); err != nil {
			t.Fatal(err)
		}
		xstride, ostride := n+r.Intn(3), 4+r.Intn(3)
		x := randFloats(r, (maxMultiTokens-1)*xstride+n, mode)
		for _, k := range allKernels() {
			for nt := 2; nt <= maxMultiTokens; nt++ {
				out := make([]float32, (nt-1)*ostride+4)
				gemv4MultiKernel(k, ci)(w, stride, x, xstride, n, nt, out, ostride)
				for tok := range nt {
					xt := x[tok*xstride:][:n]
					want := make([]float32, 4)
					gemv4Kernel(k, ci)(w, stride, xt, want)
					for i, v := range want {
						got := out[tok*ostride+i]
						if !sameBits(got, v) {
							t.Fatalf("%s %s n=%d mode=%d, %d tokens: token %d row %d: %v (%#x), one token alone %v (%#x)",
								c.name, k.name, n, mode, nt, tok, i, got, math.Float32bits(got), v, math.Float32bits(v))
						}
						row := w[i*stride:][:n*es]
						ref := c.dot(genericKernels(), row, xt)
						_, mag := oracleDot(t, c.wt, quant.F32, row, f32Bytes(xt), n)
						if d := math.Abs(float64(got) - float64(ref)); d > 1e-5*mag+1e-30 {
							t.Fatalf("%s %s n=%d mode=%d, %d tokens: token %d row %d: %v, generic %v", c.name, k.name, n, mode, nt, tok, i, got, ref)
						}
					}
				}
			}
		}
	}
}

// TestGemv4Multi: each set's multi-token float kernels give each token's outputs bit for
// bit as its one-token kernels do, for F32, F16 and BF16 weights, 2 to 8 tokens, lengths
// with and without a tail.
func TestGemv4Multi(t *testing.T) {
	for _, n := range []int{1, 8, 31, 32, 33, 64, 100, 2048} {
		for mode := range numModes {
			checkGemv4Multi(t, int64(n*10+mode), n, mode)
		}
	}
}

func FuzzGemv4Multi(f *testing.F) {
	f.Add(int64(1), uint16(64), uint8(modeRandom))
	f.Add(int64(2), uint16(97), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, n uint16, mode uint8) {
		checkGemv4Multi(t, seed, int(n%4096)+1, int(mode%numModes))
	})
}

// TestMatMulFewTokensMatchOne: below the GEMM crossover, each token of a float MatMul gets
// the outputs of a MatMul of that token alone, bit for bit, so that a speculative verify
// step gives its tokens the logits of decode steps (greedy speculation keeps the tokens).
// It runs on every kernel set of this CPU (the tests' set first), with lengths with and
// without a tail.
func TestMatMulFewTokensMatchOne(t *testing.T) {
	sets := KernelSets()
	if s := testKernelSet(); s != "" {
		sets = []string{s}
	}
	for _, set := range sets {
		for _, cols := range []int{96, 320, 97} {
			t.Run(fmt.Sprintf("%s/cols=%d", set, cols), func(t *testing.T) { checkFewTokensMatchOne(t, set, cols) })
		}
	}
}

// checkFewTokensMatchOne is TestMatMulFewTokensMatchOne on kernel set set, cols columns.
func checkFewTokensMatchOne(t *testing.T, set string, cols int) {
	p, err := NewPoolKernels(2, set)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := rand.New(rand.NewSource(int64(3 + cols)))
	for _, wt := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		rows := 37
		rb, err := wt.RowBytes(cols)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, rows*rb)
		if err := quant.Quantize(wt, randFloats(r, rows*cols, 0), data); err != nil {
			t.Fatal(err)
		}
		w := Weight{Type: wt, Rows: rows, Cols: cols, Data: data}
		for n := 2; n < gemmMinTokens(p.kern, wt); n++ {
			x := randFloats(r, n*cols, 0)
			out := make([]float32, n*rows)
			if err := MatMul(p, out, w, x, n); err != nil {
				t.Fatal(err)
			}
			one := make([]float32, rows)
			for tok := range n {
				if err := MatMul(p, one, w, x[tok*cols:(tok+1)*cols], 1); err != nil {
					t.Fatal(err)
				}
				for i, v := range one {
					if got := out[tok*rows+i]; !sameBits(got, v) {
						t.Fatalf("%s, %d tokens: token %d row %d: %v, alone %v", wt, n, tok, i, got, v)
					}
				}
			}
		}
	}
}
