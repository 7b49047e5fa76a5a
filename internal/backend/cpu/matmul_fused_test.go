package cpu

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// checkFused multiplies x (n tokens) by weights of type wt and the given row counts with
// MatMuls, and by the first two (their rows made equal) with MatMulSwiGLU, and requires
// both bit for bit equal to MatMul per weight (then SwiGLU) on the same pool.
func checkFused(t *testing.T, p *Pool, r *rand.Rand, wt quant.Type, rows []int, cols, n, mode int) {
	t.Helper()
	ws := make([]Weight, len(rows))
	for i, nr := range rows {
		ws[i], _ = randWeight(t, r, wt, nr, cols)
	}
	x := randFloats(r, n*cols, mode)
	name := func(what string) string {
		return p.KernelSet() + "/" + wt.String() + "/" + what
	}

	outs, want := make([][]float32, len(ws)), make([][]float32, len(ws))
	for i, w := range ws {
		outs[i] = make([]float32, n*w.Rows)
		want[i] = make([]float32, n*w.Rows)
		if err := MatMul(p, want[i], w, x, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := MatMuls(p, outs, ws, x, n); err != nil {
		t.Fatal(err)
	}
	for i := range ws {
		for j, v := range want[i] {
			if !sameBits(outs[i][j], v) {
				t.Fatalf("%s: %d tokens, weight %d (%dx%d) out[%d] = %v, MatMul %v", name("matmuls"), n, i, ws[i].Rows, cols, j, outs[i][j], v)
			}
		}
	}

	gate := ws[0]
	up, _ := randWeight(t, r, wt, gate.Rows, cols)
	u := make([]float32, n*gate.Rows)
	if err := MatMul(p, u, up, x, n); err != nil {
		t.Fatal(err)
	}
	g := want[0]
	if err := SwiGLU(p, g, g, u); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n*gate.Rows)
	if err := MatMulSwiGLU(p, got, gate, up, x, n); err != nil {
		t.Fatal(err)
	}
	for j, v := range g {
		if !sameBits(got[j], v) {
			t.Fatalf("%s: %d tokens, %dx%d out[%d] = %v, MatMul+SwiGLU %v", name("swiglu"), n, gate.Rows, cols, j, got[j], v)
		}
	}
}

// TestMatMulsFused compares the fused products with the separate ones on every kernel set
// and thread count, for the decode and many-token paths, row counts that leave partial
// panels of 8 and of 4 rows, and weight types with and without a fused path.
func TestMatMulsFused(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	pools := testPools(t, 1, 2)
	shapes := []struct {
		rows []int
		cols int
	}{
		{[]int{64, 16, 16}, 256},
		{[]int{44, 12, 20}, 96},
		{[]int{6, 3}, 32},
		{[]int{21}, 64},
	}
	for _, p := range pools {
		for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.F32} {
			for _, sh := range shapes {
				cols := sh.cols
				if wt == quant.Q4_K {
					cols = 256
				}
				for _, n := range []int{1, 2, 3, 9, 17, 40} {
					checkFused(t, p, r, wt, sh.rows, cols, n, modeRandom)
				}
			}
		}
	}
}

// TestMatMulsMixedTypes checks that weights of different types are multiplied one by one,
// with MatMul's results.
func TestMatMulsMixedTypes(t *testing.T) {
	r := rand.New(rand.NewSource(32))
	const cols, n = 64, 5
	wq, _ := randWeight(t, r, quant.Q8_0, 24, cols)
	w4, _ := randWeight(t, r, quant.Q4_0, 16, cols)
	x := randFloats(r, n*cols, modeRandom)
	for _, p := range testPools(t, 2) {
		outs := [][]float32{make([]float32, n*24), make([]float32, n*16)}
		if err := MatMuls(p, outs, []Weight{wq, w4}, x, n); err != nil {
			t.Fatal(err)
		}
		for i, w := range []Weight{wq, w4} {
			want := make([]float32, n*w.Rows)
			if err := MatMul(p, want, w, x, n); err != nil {
				t.Fatal(err)
			}
			for j, v := range want {
				if !sameBits(outs[i][j], v) {
					t.Fatalf("%s: weight %d out[%d] = %v, MatMul %v", p.KernelSet(), i, j, outs[i][j], v)
				}
			}
		}
	}
}

// TestMatMulsErrors checks the shape errors of the fused products.
func TestMatMulsErrors(t *testing.T) {
	r := rand.New(rand.NewSource(33))
	p := newPoolWith(2, genericKernels())
	defer p.Close()
	w, _ := randWeight(t, r, quant.Q8_0, 16, 64)
	w2, _ := randWeight(t, r, quant.Q8_0, 8, 64)
	x := make([]float32, 2*64)
	out := make([]float32, 2*16)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"count", MatMuls(p, [][]float32{out}, []Weight{w, w}, x, 2), "2 weights"},
		{"short out", MatMuls(p, [][]float32{out, out[:8]}, []Weight{w, w}, x, 2), "weight 1"},
		{"short x", MatMuls(p, [][]float32{out}, []Weight{w}, x[:64], 2), "x has"},
		{"swiglu shapes", MatMulSwiGLU(p, out, w, w2, x, 2), "differ"},
		{"swiglu short out", MatMulSwiGLU(p, out[:16], w, w, x, 2), "out has"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
}

// TestSwiGLUPositionFree requires SwiGLU's value at an index to be the same whatever the
// slice's length and offset (MatMulSwiGLU relies on it).
func TestSwiGLUPositionFree(t *testing.T) {
	r := rand.New(rand.NewSource(34))
	g, u := randFloats(r, 301, modeRandom), randFloats(r, 301, modeRandom)
	for _, p := range testPools(t, 1) {
		whole := make([]float32, len(g))
		if err := SwiGLU(p, whole, g, u); err != nil {
			t.Fatal(err)
		}
		for _, span := range [][2]int{{0, 1}, {3, 10}, {7, 300}, {100, 301}} {
			a, b := span[0], span[1]
			part := make([]float32, b-a)
			if err := SwiGLU(p, part, g[a:b], u[a:b]); err != nil {
				t.Fatal(err)
			}
			for i, v := range part {
				if !sameBits(v, whole[a+i]) {
					t.Fatalf("%s: [%d:%d] index %d = %v, whole %v", p.KernelSet(), a, b, a+i, v, whole[a+i])
				}
			}
		}
	}
}

// FuzzMatMulSwiGLU compares the fused products with the separate ones for fuzzed shapes,
// token counts and value ranges.
func FuzzMatMulSwiGLU(f *testing.F) {
	f.Add(int64(1), uint8(12), uint8(2), uint8(1), uint8(modeRandom), false)
	f.Add(int64(2), uint8(33), uint8(5), uint8(19), uint8(modeExtreme), true)
	f.Add(int64(3), uint8(4), uint8(1), uint8(3), uint8(modeUnit), false)
	f.Fuzz(func(t *testing.T, seed int64, rows, nb, n, mode uint8, q4 bool) {
		r := rand.New(rand.NewSource(seed))
		wt := quant.Q8_0
		if q4 {
			wt = quant.Q4_0
		}
		nr := int(rows%64) + 1
		rs := []int{nr, nr/2 + 1, nr%7 + 1}
		for _, p := range testPools(t, 2) {
			checkFused(t, p, r, wt, rs, 32*(int(nb%8)+1), int(n%40)+1, int(mode%numModes))
		}
	})
}

// checkSiluCombine compares every kernel set's siluCombine with the scalar twin bit for
// bit, in place (out = g) and out of place, over n values of the given mode.
func checkSiluCombine(t *testing.T, seed int64, n, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	g, u := randFloats(r, n, mode), randFloats(r, n, mode)
	e := make([]float32, n)
	for i, v := range g {
		e[i] = float32(math.Exp(float64(-v)))
	}
	want := make([]float32, n)
	siluCombineGeneric(want, g, u, e)
	for _, k := range allKernels() {
		got := make([]float32, n)
		k.siluCombine(got, g, u, e)
		inPlace := append([]float32(nil), g...)
		k.siluCombine(inPlace, inPlace, u, e)
		for i := range want {
			if !sameBits(got[i], want[i]) || !sameBits(inPlace[i], want[i]) {
				t.Fatalf("%s: n=%d [%d] = %v (in place %v), generic %v", k.name, n, i, got[i], inPlace[i], want[i])
			}
		}
	}
}

func TestSiluCombine(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 64, 255} {
		for mode := range numModes {
			checkSiluCombine(t, int64(n), n, mode)
		}
	}
}

func FuzzSiluCombine(f *testing.F) {
	f.Add(int64(1), uint16(64), uint8(modeRandom))
	f.Add(int64(2), uint16(13), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, n uint16, mode uint8) {
		checkSiluCombine(t, seed, int(n%1024)+1, int(mode%numModes))
	})
}
