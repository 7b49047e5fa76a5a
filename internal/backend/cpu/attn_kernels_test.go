package cpu

import (
	"math"
	"math/rand"
	"testing"
)

// checkAttnKernels compares every kernel set's attnScores and attnWsum with the generic
// twins on n keys/values of hd values a padded stride apart, and each set's F16 kernels
// with its own float32 kernels over a widened copy of the halves (see checkAttnF16).
func checkAttnKernels(t *testing.T, seed int64, n, hd, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	stride := hd + r.Intn(3)*8
	kv := randFloats(r, n*stride, mode)
	q := randFloats(r, hd, mode)
	e := randFloats(r, n, mode)
	acc0 := randFloats(r, hd, mode)
	wantSc := make([]float32, n)
	attnScoresGeneric(wantSc, q, kv, stride)
	wantAcc := append([]float32(nil), acc0...)
	attnWsumGeneric(wantAcc, e, kv, stride)
	for _, k := range allKernels() {
		sc := make([]float32, n)
		k.attnScores(sc, q, kv, stride)
		for j := range sc {
			var mag float64
			for i := range hd {
				mag += math.Abs(float64(q[i]) * float64(kv[j*stride+i]))
			}
			if d := math.Abs(float64(sc[j] - wantSc[j])); d > 1e-5*mag+1e-30 {
				t.Fatalf("%s scores n=%d hd=%d: [%d] = %g, generic %g", k.name, n, hd, j, sc[j], wantSc[j])
			}
		}
		acc := append([]float32(nil), acc0...)
		k.attnWsum(acc, e, kv, stride)
		for i := range acc {
			mag := math.Abs(float64(acc0[i]))
			for j := range n {
				mag += math.Abs(float64(e[j]) * float64(kv[j*stride+i]))
			}
			if d := math.Abs(float64(acc[i] - wantAcc[i])); d > 1e-5*mag+1e-30 {
				t.Fatalf("%s wsum n=%d hd=%d: [%d] = %g, generic %g", k.name, n, hd, i, acc[i], wantAcc[i])
			}
		}
		checkAttnF16(t, k, q, e, acc0, kv, stride)
	}
}

// checkAttnF16 checks that k's attnScoresF16 and attnWsumF16 over kv held as halves give
// bit for bit what its attnScores and attnWsum give over those halves widened to float32.
func checkAttnF16(t *testing.T, k *kernels, q, e, acc0, kv []float32, stride int) {
	t.Helper()
	n, hd := len(e), len(q)
	halves := make([]byte, 2*len(kv))
	putF16s(halves, kv)
	wide := make([]float32, len(kv))
	cvtF16Generic(wide, halves)
	same := func(a, b float32) bool {
		return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
	}
	sc, want := make([]float32, n), make([]float32, n)
	k.attnScoresF16(sc, q, halves, stride)
	k.attnScores(want, q, wide, stride)
	for j := range sc {
		if !same(sc[j], want[j]) {
			t.Fatalf("%s f16 scores n=%d hd=%d: [%d] = %g, over the widened keys %g", k.name, n, hd, j, sc[j], want[j])
		}
	}
	acc, wantAcc := append([]float32(nil), acc0...), append([]float32(nil), acc0...)
	k.attnWsumF16(acc, e, halves, stride)
	k.attnWsum(wantAcc, e, wide, stride)
	for i := range acc {
		if !same(acc[i], wantAcc[i]) {
			t.Fatalf("%s f16 wsum n=%d hd=%d: [%d] = %g, over the widened values %g", k.name, n, hd, i, acc[i], wantAcc[i])
		}
	}
}

func TestAttnKernels(t *testing.T) {
	for _, n := range []int{1, 3, 4, 5, 16, 33} {
		for _, hd := range []int{8, 12, 64, 72, 128, 264} {
			for mode := range numModes {
				checkAttnKernels(t, int64(n*1000+hd*10+mode), n, hd, mode)
			}
		}
	}
}

func FuzzAttnKernels(f *testing.F) {
	f.Add(int64(1), uint8(16), uint8(8), uint8(modeRandom))
	f.Add(int64(2), uint8(5), uint8(9), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, n, hd8, mode uint8) {
		checkAttnKernels(t, seed, int(n%64)+1, 8*(int(hd8%32)+1)-int(hd8/128)*3, int(mode%numModes))
	})
}
