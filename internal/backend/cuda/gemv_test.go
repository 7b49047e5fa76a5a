package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
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

// gemvFor is the GEMV kernel Ops.GEMV launches for n rows of a BF16 weight.
func gemvFor(n int) gemvVariant {
	name, rows := gemvKernel(n, BF16)
	return gemvVariant{name, rows}
}

// testGEMV checks the GEMV kernels Ops.GEMV launches, for every row count 1..8 and
// shapes whose m is no multiple of the rows per block and whose k is no multiple of the
// block's chunk stride, against a float64 reference.
func testGEMV(t *testing.T, e *env, r *rand.Rand) {
	shapes := []struct{ k, m int }{{1000, 37}, {4096, 20}, {72, 9}}
	for _, dt := range []DType{BF16, F16} {
		for _, s := range shapes {
			xv, wv := randVals(r, GEMVMaxRows*s.k, 1), randVals(r, s.m*s.k, 1)
			x, xh := e.upload(t, F32, xv)
			w, wh := e.upload(t, dt, wv)
			for n := 1; n <= GEMVMaxRows; n++ {
				name, rows := gemvKernel(n, dt)
				y := e.poisoned(t, F32, n*s.m)
				e.do(t, func() error { return launchGEMV(e, gemvVariant{name, rows}, y, x, w, n, s.k, s.m) })
				check(t, fmt.Sprintf("gemv %s n=%d k=%d m=%d", dt, n, s.k, s.m), F32, e.download(t, y), backendtest.MatMulRef(xh[:n*s.k], wh, n, s.k, s.m))
			}
		}
	}
}

// testGEMVRows checks that the GEMV kernels of several token rows (plain, three weights at
// once, gate and up with their SwiGLU) give each row the bits the one-row kernels give it
// alone: a verify step's matmuls then agree with a decode step's, row for row.
func testGEMVRows(t *testing.T, e *env, r *rand.Rand) {
	for _, dt := range []DType{BF16, F16} {
		for _, s := range []struct{ k, m int }{{4096, 20}, {1000, 37}} {
			xv := randVals(r, GEMVMaxRows*s.k, 1)
			x, _ := e.upload(t, F32, xv)
			var w [GEMVMulti]Buffer
			for j := range w {
				w[j], _ = e.upload(t, dt, randVals(r, s.m*s.k, 1))
			}
			row := func(b Buffer, i, width int) Buffer {
				v, err := b.Slice(i*width, (i+1)*width)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			// runs computes, for n rows of x, the plain GEMV, the three-weight one and the
			// SwiGLU one, downloaded in that order.
			runs := func(x Buffer, n int) [][]float32 {
				y := e.poisoned(t, F32, n*s.m)
				var ym [GEMVMulti]Buffer
				for j := range ym {
					ym[j] = e.poisoned(t, F32, n*s.m)
				}
				yg := e.poisoned(t, F32, n*s.m)
				m := [GEMVMulti]int{s.m, s.m, s.m}
				e.do(t, func() error {
					return firstErr(e.ops.GEMV(y, x, w[0], n, s.k, s.m), e.ops.GEMVMulti(ym, x, w, n, s.k, m),
						e.ops.GEMVSwiGLU(yg, x, w[0], w[1], n, s.k, s.m))
				})
				return [][]float32{e.download(t, y), e.download(t, ym[0]), e.download(t, ym[1]), e.download(t, ym[2]), e.download(t, yg)}
			}
			alone := make([][][]float32, GEMVMaxRows)
			for i := range alone {
				alone[i] = runs(row(x, i, s.k), 1)
			}
			for n := 2; n <= GEMVMaxRows; n++ {
				got := runs(x, n)
				same, total := 0, 0
				for kind, out := range got {
					for i := range n {
						for c, v := range out[i*s.m : (i+1)*s.m] {
							total++
							if math.Float32bits(v) == math.Float32bits(alone[i][kind][c]) {
								same++
							}
						}
					}
				}
				name := fmt.Sprintf("gemv %s n=%d k=%d m=%d rows vs one-row kernels", dt, n, s.k, s.m)
				result(t, "kernel", name, fmt.Sprintf("%d/%d", same, total), "bit-identical (plain, 3 weights, swiglu)")
				if same != total {
					t.Errorf("%s: %d of %d values differ", name, total-same, total)
				}
			}
		}
	}
}

// benchGEMV records the weight bandwidth of the GEMV kernels on BF16 weights at n = 1, 2,
// 4, 5 (a verify step of 1+4) and 8, rotating over enough weight copies (at least 256 MiB) that L2 holds none of them.
func benchGEMV(t *testing.T, e *env, r *rand.Rand) {
	dv := e.dev
	for _, s := range []struct{ m, k int }{{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}} {
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
		y := e.poisoned(t, F32, 16*s.m) // room for the fused benches' second and third outputs
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
			for _, n := range []int{1, 2, 4, 5, 8} {
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
			if s.k == 4096 && (s.m == 4096 || s.m == 14336) {
				return benchFusedGEMV(t, e, ws, x, y, s.m, s.k)
			}
			return nil
		})
	}
}

// benchFusedGEMV times the fused launches against the separate ones they replace, over the
// weight copies ws of m x k (at least two): for m = 4096, the q, k and v projections of an
// 8B layer (4096 + 1024 + 1024 rows; k and v are the first 1024 rows of other copies); for
// m = 14336, gate and up with SwiGLU (two copies) against two GEMVs and the SwiGLU kernel.
func benchFusedGEMV(t *testing.T, e *env, ws []Buffer, x, y Buffer, m, k int) error {
	dv := e.dev
	if len(ws) < 3 {
		return fmt.Errorf("bench fused gemv: %d weight copies, want 3", len(ws))
	}
	rowsOf := func(w Buffer, rows int) Buffer { return Buffer{Ptr: w.Ptr, DType: w.DType, Len: rows * k} }
	for _, n := range []int{1, 5, 8} {
		var fused, separate func(i int) error
		var bytes int
		var what string
		if m == 4096 {
			what, bytes = "q+k+v 4096+1024+1024", (4096+2048)*k*2
			mname, mrows := gemvMultiKernel(n, BF16)
			name, rows := gemvKernel(n, BF16)
			y1, y2 := Buffer{Ptr: y.Ptr + 4*4096*8, DType: F32, Len: 1024 * 8}, Buffer{Ptr: y.Ptr + 4*5120*8, DType: F32, Len: 1024 * 8}
			fused = func(i int) error {
				w1, w2 := rowsOf(ws[(i+1)%len(ws)], 1024), rowsOf(ws[(i+2)%len(ws)], 1024)
				blocks := (4096+mrows-1)/mrows + 2*((1024+mrows-1)/mrows)
				return dv.Launch(e.ops.Kern.mod, mname, Dim3{blocks, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
					y, y1, y2, x, ws[i], w1, w2, n, k, 4096, 1024, 1024)
			}
			separate = func(i int) error {
				for j, c := range []struct {
					y    Buffer
					w    Buffer
					rows int
				}{{y, ws[i], 4096}, {y1, rowsOf(ws[(i+1)%len(ws)], 1024), 1024}, {y2, rowsOf(ws[(i+2)%len(ws)], 1024), 1024}} {
					if err := dv.Launch(e.ops.Kern.mod, name, Dim3{(c.rows + rows - 1) / rows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
						c.y, x, c.w, n, k, c.rows); err != nil {
						return fmt.Errorf("part %d: %w", j, err)
					}
				}
				return nil
			}
		} else {
			what, bytes = "gate+up+swiglu 2x14336", 2*m*k*2
			gname, grows := gemvGLUKernel(n, BF16)
			name, rows := gemvKernel(n, BF16)
			y2 := Buffer{Ptr: y.Ptr + uint64(4*m*n), DType: F32, Len: m * n}
			fused = func(i int) error {
				return dv.Launch(e.ops.Kern.mod, gname, Dim3{(m + grows - 1) / grows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0,
					y, x, ws[i], ws[(i+1)%len(ws)], n, k, m)
			}
			separate = func(i int) error {
				return firstErr(
					dv.Launch(e.ops.Kern.mod, name, Dim3{(m + rows - 1) / rows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0, y, x, ws[i], n, k, m),
					dv.Launch(e.ops.Kern.mod, name, Dim3{(m + rows - 1) / rows, 1, 1}, Dim3{gemvThreads, 1, 1}, 0, y2, x, ws[(i+1)%len(ws)], n, k, m),
					e.ops.SwiGLU(y, y, y2, n, m, m))
			}
		}
		for _, v := range []struct {
			label string
			fn    func(int) error
		}{{"fused", fused}, {"separate", separate}} {
			ms, err := timeMedian(dv, 9, func() error {
				for i := range ws {
					if err := v.fn(i); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			per := ms / float64(len(ws))
			result(t, "gemv", fmt.Sprintf("bf16 n=%d %s %s", n, what, v.label),
				fmt.Sprintf("%.0f GB/s", float64(bytes)/per/1e6), fmt.Sprintf("%.1f us", per*1e3))
		}
	}
	return nil
}
