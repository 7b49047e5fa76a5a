package cuda

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// openSparse opens cuSPARSELt and a handle on e's device, failing the test when the
// library is missing: a GPU machine is expected to carry it (scripts/cuda_libs.sh puts
// the pip package's folder on LD_LIBRARY_PATH).
func openSparse(t *testing.T, e *env) *Sparse {
	t.Helper()
	lib, err := OpenCuSPARSELt()
	if err != nil {
		t.Fatalf("%v (source scripts/cuda_libs.sh, which adds site-packages/nvidia/cusparselt/lib)", err)
	}
	t.Logf("%s", lib.Describe())
	var s *Sparse
	e.do(t, func() error {
		var err error
		s, err = e.dev.NewSparse(lib)
		return err
	})
	t.Cleanup(func() { e.dev.Do(func() error { return e.dev.FreeSparse(s) }) })
	return s
}

// random24 returns m rows of k values in [-1, 1) with two of every four zero, at random
// places (some groups with a third zero).
func random24(r *rand.Rand, m, k int) []float32 {
	w := randVals(r, m*k, 1)
	for g := 0; g < len(w); g += 4 {
		p := r.Perm(4)
		w[g+p[0]], w[g+p[1]] = 0, 0
		if r.IntN(8) == 0 {
			w[g+p[2]] = 0
		}
	}
	return w
}

// TestGPUSparseMatMulMatchesDense multiplies random 2:4 BF16 and F16 matrices of several
// shapes through cuSPARSELt (compressed once; the rows past n of the padded input are
// poisoned with NaN, which no output row may read) and checks the product against cuBLAS's dense
// product of the same matrices and against float64, within the 16-bit output's
// tolerance; products of one shape and bucket share a plan; a graph capture of a product
// replays it.
func TestGPUSparseMatMulMatchesDense(t *testing.T) {
	e := newEnv(t)
	s := openSparse(t, e)
	r := rand.New(rand.NewPCG(24, 1))
	type shape struct{ m, k, n int }
	shapes := []shape{{32, 32, 1}, {64, 128, 8}, {256, 512, 17}, {512, 256, 300}, {2048, 512, 64}, {128, 2048, 1}}
	buckets := map[sparsePlanKey]bool{}
	for _, dt := range []DType{BF16, F16} {
		for _, sh := range shapes {
			name := fmt.Sprintf("cusparselt %s m=%d k=%d n=%d", dt, sh.m, sh.k, sh.n)
			wb, w := e.upload(t, dt, random24(r, sh.m, sh.k))
			xb, x := e.upload(t, dt, randVals(r, sh.n*sh.k, 1))
			want := make([]float64, sh.n*sh.m)
			for i := range sh.n {
				for j := range sh.m {
					var acc float64
					for c := range sh.k {
						acc += float64(x[i*sh.k+c]) * float64(w[j*sh.k+c])
					}
					want[i*sh.m+j] = acc
				}
			}
			dense := e.poisoned(t, F32, sh.n*sh.m)
			e.do(t, func() error { return e.ops.MatMulT(dense, xb, wb, sh.n, sh.k, sh.m) })
			denseGot := e.download(t, dense)

			cols := SparseBucket(sh.n)
			buckets[sparsePlanKey{dt: dt, m: sh.m, k: sh.k, cols: cols}] = true
			xp := e.poisoned(t, dt, cols*sh.k)
			dp := e.poisoned(t, dt, cols*sh.m)
			// The backend's output buffer starts zeroed (C is D, with beta 0).
			e.do(t, func() error { return e.dev.Fill32(dp, 0) })
			y := e.poisoned(t, F32, sh.n*sh.m)
			var sw *SparseWeight
			e.do(t, func() error {
				var err error
				if sw, err = s.Compress(wb, sh.m, sh.k); err != nil {
					return err
				}
				head := Buffer{Ptr: xp.Ptr, DType: dt, Len: sh.n * sh.k}
				if err := e.dev.CopyAsync(head, xb); err != nil {
					return err
				}
				if err := e.ops.SparseMatMulT(s, dp, xp, sw, cols); err != nil {
					return err
				}
				return e.ops.Widen(y, Buffer{Ptr: dp.Ptr, DType: dt, Len: sh.n * sh.m})
			})
			got := e.download(t, y)
			check(t, name+" vs float64", dt, got, want)
			check(t, name+" vs cublas", dt, got, f64(denseGot))
			if sw.Bytes <= 0 || (sh.m*sh.k >= 1<<16 && sw.Bytes >= dt.BytesOf(sh.m*sh.k)) {
				t.Errorf("%s: compressed to %d bytes, dense %d", name, sw.Bytes, dt.BytesOf(sh.m*sh.k))
			}
			result(t, "memory", name, fmt.Sprintf("%d", sw.Bytes), fmt.Sprintf("compressed bytes, dense %d", dt.BytesOf(sh.m*sh.k)))

			// The same product replayed from a graph (decode's steps are graphs).
			y2 := e.poisoned(t, F32, sh.n*sh.m)
			var g *Graph
			err := e.dev.Do(func() error {
				var err error
				g, err = e.dev.Capture(func() error {
					if err := e.ops.SparseMatMulT(s, dp, xp, sw, cols); err != nil {
						return err
					}
					return e.ops.Widen(y2, Buffer{Ptr: dp.Ptr, DType: dt, Len: sh.n * sh.m})
				})
				if err != nil {
					return err
				}
				return firstErr(e.dev.LaunchGraph(g), e.dev.Sync(), e.dev.FreeGraph(g))
			})
			if err != nil {
				t.Errorf("%s: graph capture: %v (decode would run the product eagerly)", name, err)
			} else {
				check(t, name+" graph replay", dt, e.download(t, y2), f64(got))
			}
			e.do(t, func() error { return s.FreeSparseWeight(sw) })
		}
	}
	if s.lib.ltCompress2 == nil {
		// The plan-based compression made a plan of the smallest bucket for each shape.
		for key := range buckets {
			key.cols = sparseBucketMin
			buckets[key] = true
		}
	}
	if s.Plans() != len(buckets) {
		t.Errorf("%d plans for %d shapes and buckets", s.Plans(), len(buckets))
	}
}

// TestGPUSparseCompressRefuses: a dense matrix is not 2:4 (where the library can check it
// on the device), and a shape off the 32-multiple grid is refused before any call.
func TestGPUSparseCompressRefuses(t *testing.T) {
	e := newEnv(t)
	s := openSparse(t, e)
	r := rand.New(rand.NewPCG(24, 2))
	for _, c := range []struct {
		name string
		m, k int
		vals []float32
		need bool // the refusal needs cusparseLtSpMMAPruneCheck2
	}{
		{"dense 64x64", 64, 64, randVals(r, 64*64, 1), true},
		{"2:4 48x64", 48, 64, random24(r, 48, 64), false},
		{"2:4 64x36", 64, 36, random24(r, 64, 36), false},
	} {
		if c.need && s.lib.ltPruneCheck2 == nil {
			t.Logf("%s: cusparseLtSpMMAPruneCheck2 is not exported: not checked", c.name)
			continue
		}
		wb, _ := e.upload(t, BF16, c.vals)
		var sw *SparseWeight
		err := e.dev.Do(func() error {
			var err error
			sw, err = s.Compress(wb, c.m, c.k)
			return err
		})
		if err == nil {
			e.do(t, func() error { return s.FreeSparseWeight(sw) })
			t.Errorf("%s: compressed without an error", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
	}
}

// TestOpenCuSPARSELtMissing: without the library (this machine's case when it has no
// CUDA), the error names the library files looked for.
func TestOpenCuSPARSELtMissing(t *testing.T) {
	lib, err := OpenCuSPARSELt()
	if err == nil {
		t.Skipf("%s is installed", lib.Describe())
	}
	for _, n := range CuSPARSELtNames {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not name %s", err, n)
		}
	}
}
