package cpu

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// testPools returns a pool per kernel set and thread count, closed when the test ends.
func testPools(t testing.TB, threads ...int) []*Pool {
	var pools []*Pool
	for _, k := range allKernels() {
		for _, n := range threads {
			p := newPoolWith(n, k)
			t.Cleanup(p.Close)
			pools = append(pools, p)
		}
	}
	return pools
}

// randWeight makes a rows x cols weight of type wt from normal values.
func randWeight(t testing.TB, r *rand.Rand, wt quant.Type, rows, cols int) (Weight, []float32) {
	wf := make([]float32, rows*cols)
	for i := range wf {
		wf[i] = float32(r.NormFloat64())
	}
	rb, err := wt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	for i := range rows { // row by row: FP8's scale is per row
		if err := quant.Quantize(wt, wf[i*cols:(i+1)*cols], data[i*rb:(i+1)*rb]); err != nil {
			t.Fatal(err)
		}
	}
	return Weight{Type: wt, Rows: rows, Cols: cols, Data: data}, wf
}

// activationType is the format MatMul quantizes activations to for weights of type wt.
func activationType(wt quant.Type) quant.Type {
	switch wt {
	case quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1:
		return quant.Q8_0
	case quant.Q4_K, quant.Q5_K, quant.Q6_K:
		return quant.Q8_K
	}
	return quant.F32
}

// referenceMatMul is the oracle: weights dequantized by package quant, activations
// quantized and dequantized by package quant, products summed in float64. It also returns
// the sum of absolute products per output, for tolerances.
func referenceMatMul(t *testing.T, w Weight, x []float32, nTokens int) (want, mag []float64) {
	wd := make([]float32, w.Rows*w.Cols)
	wrb, _ := w.Type.RowBytes(w.Cols)
	for i := range w.Rows {
		if err := quant.Dequantize(w.Type, w.Data[i*wrb:(i+1)*wrb], wd[i*w.Cols:(i+1)*w.Cols]); err != nil {
			t.Fatal(err)
		}
	}
	xd := append([]float32(nil), x...)
	if at := activationType(w.Type); at != quant.F32 {
		rb, _ := at.RowBytes(len(x))
		buf := make([]byte, rb)
		if err := quant.Quantize(at, x, buf); err != nil {
			t.Fatal(err)
		}
		if err := quant.Dequantize(at, buf, xd); err != nil {
			t.Fatal(err)
		}
	}
	want = make([]float64, nTokens*w.Rows)
	mag = make([]float64, nTokens*w.Rows)
	for tok := range nTokens {
		for r := range w.Rows {
			var s, m float64
			for c := range w.Cols {
				p := float64(wd[r*w.Cols+c]) * float64(xd[tok*w.Cols+c])
				s += p
				m += math.Abs(p)
			}
			want[tok*w.Rows+r], mag[tok*w.Rows+r] = s, m
		}
	}
	return want, mag
}

func TestMatMul(t *testing.T) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.FP8}
	shapes := []struct{ rows, cols, tokens int }{
		{1, 256, 1}, {67, 256, 1}, {33, 512, 3}, {130, 256, 37}, {5, 768, 2},
	}
	testMatMulShapes(t, types, shapes)
}

// TestMatMulFP8OddShapes runs FP8 weights (rows of any length) on shapes no block type
// has, on both sides of the GEMM threshold.
func TestMatMulFP8OddShapes(t *testing.T) {
	testMatMulShapes(t, []quant.Type{quant.FP8}, []struct{ rows, cols, tokens int }{
		{1, 1, 1}, {7, 37, 1}, {13, 101, 5}, {9, 77, gemmMinTokens(genericKernels(), quant.FP8)}, {31, 203, 29},
	})
}

// testMatMulShapes compares MatMul with referenceMatMul for every type and shape, on every
// kernel set, with 1 and 3 threads.
func testMatMulShapes(t *testing.T, types []quant.Type, shapes []struct{ rows, cols, tokens int }) {
	r := rand.New(rand.NewSource(1))
	pools := testPools(t, 1, 3)
	for _, wt := range types {
		for _, sh := range shapes {
			w, _ := randWeight(t, r, wt, sh.rows, sh.cols)
			x := make([]float32, sh.tokens*sh.cols)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			for _, p := range pools {
				want, mag := referenceMatMul(t, w, oracleInput(p, w, x, sh.tokens), sh.tokens)
				out := make([]float32, sh.tokens*sh.rows)
				if err := MatMul(p, out, w, x, sh.tokens); err != nil {
					t.Fatal(err)
				}
				for i := range out {
					if d := math.Abs(float64(out[i]) - want[i]); !(d <= 1e-5*mag[i]+1e-6) { // NaN fails too
						t.Fatalf("%s %dx%d tokens=%d %s/%d threads: out[%d]=%g want %g (diff %g)",
							wt, sh.rows, sh.cols, sh.tokens, p.KernelSet(), p.Threads(), i, out[i], want[i], d)
					}
				}
			}
		}
	}
}

func TestMatMulErrors(t *testing.T) {
	p := testPool(1)
	defer p.Close()
	ok := Weight{Type: quant.Q8_0, Rows: 2, Cols: 32, Data: make([]byte, 68)}
	cases := []struct {
		name    string
		w       Weight
		x, out  int
		tokens  int
		wantErr string
	}{
		{"unsupported type", Weight{Type: quant.Q3_K, Rows: 1, Cols: 256, Data: make([]byte, 110)}, 256, 1, 1, "not supported"},
		{"partial block", Weight{Type: quant.Q8_0, Rows: 1, Cols: 33, Data: make([]byte, 100)}, 33, 1, 1, "multiple"},
		{"short data", Weight{Type: quant.Q8_0, Rows: 3, Cols: 32, Data: make([]byte, 68)}, 32, 3, 1, "needs"},
		{"short x", ok, 31, 2, 1, "x has"},
		{"short out", ok, 64, 3, 2, "out has"},
		{"no tokens", ok, 32, 2, 0, "bad shape"},
	}
	for _, c := range cases {
		err := MatMul(p, make([]float32, c.out), c.w, make([]float32, c.x), c.tokens)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: got error %v, want one containing %q", c.name, err, c.wantErr)
		}
	}
}
