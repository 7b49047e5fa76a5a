package cpu

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

// checkGemm4x3 compares every kernel set's gemm4x3 with the generic twin on random operands
// with padded strides; out starts non-zero to check that the kernel adds.
func checkGemm4x3(t *testing.T, seed int64, k, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	ldw, ldx, ldo := k+r.Intn(9), k+r.Intn(9), 4+r.Intn(5)
	w := randFloats(r, 3*ldw+k, mode)
	x := randFloats(r, 2*ldx+k, mode)
	out0 := randFloats(r, 2*ldo+4, mode)
	want := append([]float32(nil), out0...)
	gemm4x3Generic(w, ldw, x, ldx, k, want, ldo)
	for _, ks := range allKernels() {
		got := append([]float32(nil), out0...)
		ks.gemm4x3(w, ldw, x, ldx, k, got, ldo)
		for i := range 4 {
			for j := range 3 {
				var mag float64
				for c := range k {
					mag += math.Abs(float64(w[i*ldw+c]) * float64(x[j*ldx+c]))
				}
				mag += math.Abs(float64(out0[j*ldo+i]))
				o := j*ldo + i
				if d := math.Abs(float64(got[o]) - float64(want[o])); d > 1e-5*mag+1e-30 {
					t.Fatalf("%s k=%d mode=%d: out[%d][%d] = %g, generic %g", ks.name, k, mode, j, i, got[o], want[o])
				}
			}
		}
		for o := range got { // entries outside the 3x4 tile are untouched
			if o%ldo >= 4 && got[o] != out0[o] {
				t.Fatalf("%s k=%d: out[%d] outside the tile changed", ks.name, k, o)
			}
		}
	}
}

func TestGemm4x3(t *testing.T) {
	for _, k := range []int{1, 7, 8, 9, 16, 63, 64, 512, 1000} {
		for mode := range numModes {
			checkGemm4x3(t, int64(k*10+mode), k, mode)
		}
	}
}

func FuzzGemm4x3(f *testing.F) {
	f.Add(int64(1), uint16(8), uint8(modeRandom))
	f.Add(int64(2), uint16(13), uint8(modeExtreme))
	f.Add(int64(3), uint16(512), uint8(modeUnit))
	f.Fuzz(func(t *testing.T, seed int64, k uint16, mode uint8) {
		checkGemm4x3(t, seed, int(k%2048)+1, int(mode%numModes))
	})
}

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
