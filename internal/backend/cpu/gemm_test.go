package cpu

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// checkCvtHalf widens random half-precision bit patterns with every kernel set and requires
// bit-exact agreement with the generic twin (any NaN matches any NaN).
func checkCvtHalf(t *testing.T, seed int64, n int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	src := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(r.Intn(1<<16)))
	}
	type cvt struct {
		name string
		fn   func(k *kernels) func(dst []float32, src []byte)
	}
	for _, c := range []cvt{
		{"f16", func(k *kernels) func(dst []float32, src []byte) { return k.cvtF16 }},
		{"bf16", func(k *kernels) func(dst []float32, src []byte) { return k.cvtBF16 }},
	} {
		want := make([]float32, n)
		c.fn(genericKernels())(want, src)
		for _, ks := range allKernels() {
			got := make([]float32, n)
			c.fn(ks)(got, src)
			for i := range got {
				g, w := got[i], want[i]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("%s %s n=%d: [%d] = %g, generic %g", c.name, ks.name, n, i, g, w)
				}
			}
		}
	}
}

func TestCvtHalf(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 64, 1001} {
		checkCvtHalf(t, int64(n), n)
	}
}

func FuzzCvtHalf(f *testing.F) {
	f.Add(int64(1), uint16(9))
	f.Add(int64(2), uint16(4096))
	f.Fuzz(func(t *testing.T, seed int64, n uint16) {
		checkCvtHalf(t, seed, int(n%8192)+1)
	})
}

// checkGemmTiles compares every kernel set's micro-kernels of the many-token path with the
// generic twin on random operands (w with a padded stride, k of any length); acc starts
// with garbage to check that the kernels overwrite it; the SIMD sets must agree bit for bit.
func checkGemmTiles(t *testing.T, seed int64, k, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	ldw := k + r.Intn(9)
	w := randFloats(r, (gemmRows-1)*ldw+k, mode)
	for _, width := range []int{gemmWide, gemmNarrow} {
		xt := randFloats(r, width*k, mode)
		want := make([]float32, gemmRows*width)
		gemmTGeneric(width, w, ldw, xt, k, want)
		var simd []float32 // the first SIMD set's tile
		for _, ks := range allKernels() {
			tk := gemmTileKernels(ks)
			tile := tk.tile16
			if width == gemmNarrow {
				tile = tk.tile8
			}
			got := randFloats(r, gemmRows*width, modeExtreme)
			tile(w, ldw, xt, k, got)
			for i := range gemmRows {
				for j := range width {
					var mag float64
					for c := range k {
						mag += math.Abs(float64(w[i*ldw+c]) * float64(xt[c*width+j]))
					}
					o := i*width + j
					if d := math.Abs(float64(got[o]) - float64(want[o])); d > 1e-5*mag+1e-30 || got[o] != got[o] && want[o] == want[o] {
						t.Fatalf("%s width=%d k=%d mode=%d: acc[%d][%d] = %g, generic %g", ks.name, width, k, mode, i, j, got[o], want[o])
					}
				}
			}
			// Every SIMD set sums a lane with one fused multiply-add per step in order of
			// c, so their tiles agree bit for bit.
			if ks.name == genericName {
				continue
			}
			if simd == nil {
				simd = got
				continue
			}
			for o := range got {
				if !sameBits(got[o], simd[o]) {
					t.Fatalf("%s width=%d k=%d mode=%d: acc[%d] = %g, %s %g (must be equal)", ks.name, width, k, mode, o, got[o], allKernels()[0].name, simd[o])
				}
			}
		}
	}
}

func TestGemmTiles(t *testing.T) {
	for _, k := range []int{1, 3, 4, 5, 8, 31, 64, 576, 1001} {
		for mode := range numModes {
			checkGemmTiles(t, int64(k*10+mode), k, mode)
		}
	}
}

func FuzzGemmTiles(f *testing.F) {
	f.Add(int64(1), uint16(8), uint8(modeRandom))
	f.Add(int64(2), uint16(13), uint8(modeExtreme))
	f.Add(int64(3), uint16(576), uint8(modeUnit))
	f.Fuzz(func(t *testing.T, seed int64, k uint16, mode uint8) {
		checkGemmTiles(t, seed, int(k%2048)+1, int(mode%numModes))
	})
}

// TestPackTokens checks the packed layout of the activations against its definition, for
// token counts around the group widths and column chunks of any alignment.
func TestPackTokens(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, n := range []int{1, 3, 4, 7, 8, 9, 15, 16, 17, 24, 25, 32, 33, 40} {
		for _, cols := range []int{1, 5, 64, 70} {
			x := randFloats(r, n*cols, modeRandom)
			dst := randFloats(r, packedLen(n, cols), modeRandom)
			for c0 := 0; c0 < cols; c0 += 3 {
				packTokens(dst, x, n, cols, c0, min(c0+3, cols))
			}
			off := 0
			for t0 := 0; t0 < n; {
				wd := tokenGroupWidth(t0, n)
				if wd != gemmWide && wd != gemmNarrow || t0+wd < n && wd != gemmWide {
					t.Fatalf("n=%d: group at %d has width %d", n, t0, wd)
				}
				for c := range cols {
					for tt := range wd {
						var want float32
						if t0+tt < n {
							want = x[(t0+tt)*cols+c]
						}
						if got := dst[off+c*wd+tt]; got != want {
							t.Fatalf("n=%d cols=%d: group %d column %d lane %d = %g, want %g", n, cols, t0, c, tt, got, want)
						}
					}
				}
				off += wd * cols
				t0 += wd
			}
			if off != len(dst) {
				t.Fatalf("n=%d cols=%d: groups cover %d of %d packed values", n, cols, off, len(dst))
			}
		}
	}
}

// TestMatMulManyTokens runs the many-token path for token counts around the group widths on
// rows that are not a whole number of panels, on one pool per kernel set whose scratch is
// reused across shapes, against the float64 oracle (of the bfloat16-rounded activations
// where a set takes the BF16 path).
func TestMatMulManyTokens(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	pools := testPools(t, 2)
	cases := []struct {
		wt         quant.Type
		rows, cols int
	}{
		{quant.F32, 13, 37}, {quant.Q8_0, 25, 96}, {quant.BF16, 7, 64}, {quant.Q8_0, 6, 320}, {quant.Q4_K, 11, 256},
	}
	for _, c := range cases {
		w, _ := randWeight(t, r, c.wt, c.rows, c.cols)
		for _, n := range []int{3, 8, 9, 16, 17, 25, 32, 33, 48, 49} {
			x := randFloats(r, n*c.cols, modeRandom)
			for _, p := range pools {
				want, mag := referenceMatMul(t, w, oracleInput(p, w, x, n), n)
				out := randFloats(r, n*c.rows, modeRandom)
				if err := MatMul(p, out, w, x, n); err != nil {
					t.Fatal(err)
				}
				for i := range out {
					if d := math.Abs(float64(out[i]) - want[i]); d > 1e-5*mag[i]+1e-6 {
						t.Fatalf("%s %dx%d tokens=%d %s: out[%d]=%g want %g", c.wt, c.rows, c.cols, n, p.KernelSet(), i, out[i], want[i])
					}
				}
			}
		}
	}
}

// TestMatMulManyTokensAllocs checks that the many-token path allocates nothing once its
// pool's scratch is warm.
func TestMatMulManyTokensAllocs(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	p := testPool(2)
	defer p.Close()
	w, _ := randWeight(t, r, quant.Q8_0, 48, 128)
	x := randFloats(r, 32*128, modeRandom)
	out := make([]float32, 32*48)
	if err := MatMul(p, out, w, x, 32); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(20, func() { _ = MatMul(p, out, w, x, 32) }); a != 0 {
		t.Fatalf("MatMul of 32 tokens allocates %v times per call", a)
	}
}

// TestFewTokensAllocs checks that the one-token (decode) products allocate nothing once
// their pool's scratch is warm: MatMul for each family of weight types (Q8_0's 8-row
// kernels, the dot kernels of Q5_0 and the K-quants, the float kernels) and MatMulSwiGLU's
// fused Q8_0 path.
func TestFewTokensAllocs(t *testing.T) {
	r := rand.New(rand.NewSource(10))
	p := testPool(2)
	defer p.Close()
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q5_0, quant.Q4_K, quant.BF16} {
		gate, _ := randWeight(t, r, wt, 64, 256)
		up, _ := randWeight(t, r, wt, 64, 256)
		x := randFloats(r, 256, modeRandom)
		out := make([]float32, 64)
		ops := map[string]func(){"MatMul": func() { _ = MatMul(p, out, gate, x, 1) }}
		if wt == quant.Q8_0 {
			ops["MatMulSwiGLU"] = func() { _ = MatMulSwiGLU(p, out, gate, up, x, 1) }
		}
		for name, op := range ops {
			op()
			if a := testing.AllocsPerRun(20, op); a != 0 {
				t.Errorf("%s of one token with %s weights allocates %v times per call", name, wt, a)
			}
		}
	}
}
