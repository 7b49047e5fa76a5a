package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// gemvVariant is one GEMV kernel with the weight rows one of its blocks computes.
type gemvVariant struct {
	name string
	rows int
}

// launchGEMV runs kernel v on n rows of x (inside Do).
func launchGEMV(e *env, v gemvVariant, y, x, w Buffer, n, k, m int) error {
	return e.dev.Launch(e.ops.Kern.mod, v.name, Dim3{(m + v.rows - 1) / v.rows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
		y, x, w, n, k, m)
}

// gemvRef is y[t][r] = sum_c x[t][c] * w[r][c] in float64.
func gemvRef(x, w []float32, n, k, m int) []float64 {
	want := make([]float64, n*m)
	for t := range n {
		for r := range m {
			var s float64
			for c := range k {
				s += float64(x[t*k+c]) * float64(w[r*k+c])
			}
			want[t*m+r] = s
		}
	}
	return want
}

// gemvFor is the GEMV kernel Backend.matMul launches for n rows of a BF16 weight.
func gemvFor(n int) gemvVariant {
	name, rows := gemvKernel(n, BF16)
	return gemvVariant{name, rows}
}

// testGEMV checks the GEMV kernels Backend.matMul launches, for every row count 1..8 and
// shapes whose m is no multiple of the rows per block and whose k is no multiple of the
// block's chunk stride, against a float64 reference.
func testGEMV(t *testing.T, e *env, r *rand.Rand) {
	shapes := []struct{ k, m int }{{1000, 37}, {4096, 20}, {72, 9}}
	for _, dt := range []DType{BF16, F16} {
		for _, s := range shapes {
			xv, wv := randVals(r, gemvMaxRows*s.k, 1), randVals(r, s.m*s.k, 1)
			x, xh := e.upload(t, F32, xv)
			w, wh := e.upload(t, dt, wv)
			for n := 1; n <= gemvMaxRows; n++ {
				name, rows := gemvKernel(n, dt)
				y := e.poisoned(t, F32, n*s.m)
				e.do(t, func() error { return launchGEMV(e, gemvVariant{name, rows}, y, x, w, n, s.k, s.m) })
				check(t, fmt.Sprintf("gemv %s n=%d k=%d m=%d", dt, n, s.k, s.m), F32, e.download(t, y), gemvRef(xh[:n*s.k], wh, n, s.k, s.m))
			}
		}
	}
}

// benchGEMV records the weight bandwidth of the GEMV kernels on BF16 weights at n = 1 and
// 8, rotating over enough weight copies (at least 256 MiB) that L2 holds none of them.
func benchGEMV(t *testing.T, e *env, r *rand.Rand) {
	dv := e.dev
	for _, s := range []struct{ m, k int }{{4096, 4096}, {14336, 4096}, {4096, 14336}} {
		wbytes := s.m * s.k * 2
		copies := max(1, (256<<20+wbytes-1)/wbytes)
		h := make([]uint16, s.m*s.k)
		for i := range h {
			h[i] = uint16(0x3c00 + r.IntN(0x0400)) // bf16 values in [0.0078, 0.0156): no zeros or NaNs
			if i%2 == 1 {
				h[i] |= 0x8000
			}
		}
		xv := randVals(r, 8*s.k, 1)
		x, _ := e.upload(t, F32, xv)
		y := e.poisoned(t, F32, 8*s.m)
		e.do(t, func() error {
			ws := make([]Buffer, copies)
			defer func() {
				for _, w := range ws {
					if w.Ptr != 0 {
						dv.Free(w)
					}
				}
			}()
			for i := range ws {
				var err error
				if ws[i], err = dv.Alloc(BF16, s.m*s.k); err != nil {
					return err
				}
				if err := Upload(dv, ws[i], h); err != nil {
					return err
				}
			}
			for _, n := range []int{1, 8} {
				v := gemvFor(n)
				ms, err := timeMedian(dv, 9, func() error {
					for _, w := range ws {
						if err := launchGEMV(e, v, y, x, w, n, s.k, s.m); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				per := ms / float64(copies)
				result(t, "gemv", fmt.Sprintf("bf16 n=%d m=%d k=%d %s", n, s.m, s.k, v.name),
					fmt.Sprintf("%.0f GB/s", float64(wbytes)/per/1e6), fmt.Sprintf("%.1f us, weights of %d rows/block", per*1e3, v.rows))
			}
			return nil
		})
	}
}
