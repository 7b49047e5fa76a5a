package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// rmsNormRef is RMSNorm of the rows of x in float64.
func rmsNormRef(x, w []float32, rows, dim int, eps float64) []float32 {
	out := make([]float32, len(x))
	for r := range rows {
		var ss float64
		for c := range dim {
			v := float64(x[r*dim+c])
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+eps)
		for c := range dim {
			out[r*dim+c] = float32(float64(x[r*dim+c]) * inv * float64(w[c]))
		}
	}
	return out
}

// shadowRun is one pass of the shadow test's op chain and its outputs.
type shadowRun struct {
	q, down, biased []float32
	// seqMatMuls is how much stream work MatMuls queued after RMSNorm (1 GEMM when the
	// norm's shadow was used, 2 with a cast).
	seqMatMuls uint64
}

// TestBackendShadowedMatMuls checks the 16-bit shadows (RMSNorm and MatMulSwiGLU writing
// the copy the next cuBLAS GEMM reads) against a float64 reference, checks that the shadow replaces the cast launch,
// that an op between producer and consumer (AddBias on the normed rows) makes the GEMM
// cast again, that growing the scratch between a shadow's producer and its consumer (the
// first MatMulSwiGLU of a wider MLP) drops the shadow, and that shadows on and off give
// bit-identical results.
func TestBackendShadowedMatMuls(t *testing.T) {
	b := newTestBackend(t)
	r := rand.New(rand.NewPCG(11, 13))
	const k, m, f = 256, 96, 384 // f > k: MatMulSwiGLU grows the scratch after RMSNorm's shadow
	const eps = 1e-5
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		for _, n := range []int{16, 40, 256} {
			// Start every case with the smallest scratch, so that the chain grows it.
			if err := b.Run(func() error { return b.ensureScratchReset() }); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%s n=%d", dt, n)
			xv := randVals(r, n*k, 1)
			xt, _ := uploadMatrix(t, b, cuda.F32, n, k, xv)
			addv := randVals(r, n*k, 0.5)
			addt, _ := uploadMatrix(t, b, cuda.F32, n, k, addv)
			normT, normW := uploadMatrix(t, b, cuda.F32, 1, k, randVals(r, k, 1))
			biasT, biasV := uploadMatrix(t, b, cuda.F32, 1, k, randVals(r, k, 1))
			wq, wqh := uploadMatrix(t, b, dt, m, k, randVals(r, m*k, 1))
			wg, wgh := uploadMatrix(t, b, dt, f, k, randVals(r, f*k, 1))
			wu, wuh := uploadMatrix(t, b, dt, f, k, randVals(r, f*k, 1))
			wd, wdh := uploadMatrix(t, b, dt, m, f, randVals(r, m*f, 1))
			runs := make([]shadowRun, 2)
			was := b.shadows
			for i, on := range []bool{true, false} {
				b.shadows = on
				b.castType = dt // as after a first step: RMSNorm shadows in the weights' type
				res, _ := uploadMatrix(t, b, cuda.F32, n, k, xv)
				h, h2, glu := newOut(t, b, n, k), newOut(t, b, n, k), newOut(t, b, n, f)
				q, down, biased := newOut(t, b, n, m), newOut(t, b, n, m), newOut(t, b, n, m)
				var seq uint64
				err := b.Run(func() error {
					if err := b.RMSNorm(h, xt, normT, eps); err != nil {
						return err
					}
					s0 := b.dev.Seq()
					if err := b.MatMuls([]backend.Tensor{q}, h, []backend.Tensor{wq}); err != nil {
						return err
					}
					seq = b.dev.Seq() - s0
					return firstErr(b.RMSNormResidual(h2, res, addt, normT, eps), b.MatMulSwiGLU(glu, h2, wg, wu),
						b.MatMul(down, glu, wd), b.RMSNorm(h, xt, normT, eps), b.AddBias(h, biasT), b.MatMul(biased, h, wq))
				})
				if err != nil {
					t.Fatalf("%s shadows=%v: %v", name, on, err)
				}
				runs[i] = shadowRun{q: tensorValues(t, b, q), down: tensorValues(t, b, down), biased: tensorValues(t, b, biased), seqMatMuls: seq}
			}
			b.shadows = was
			if runs[0].seqMatMuls != 1 || runs[1].seqMatMuls != 2 {
				t.Errorf("%s: MatMuls after RMSNorm queued %d (shadows) and %d (none) stream ops, want 1 and 2", name, runs[0].seqMatMuls, runs[1].seqMatMuls)
			}
			hv := rmsNormRef(xv, normW, n, k, eps)
			check(t, "shadow q "+name, dt, runs[0].q, backendtest.MatMulRef(hv, wqh, n, k, m))
			sum := make([]float32, n*k)
			for i := range sum {
				sum[i] = xv[i] + addv[i]
			}
			h2v := rmsNormRef(sum, normW, n, k, eps)
			gate, up := backendtest.MatMulRef(h2v, wgh, n, k, f), backendtest.MatMulRef(h2v, wuh, n, k, f)
			gv := make([]float32, n*f)
			for i, v := range swigluRef(gate, up) {
				gv[i] = float32(v)
			}
			check(t, "shadow swiglu down "+name, dt, runs[0].down, backendtest.MatMulRef(gv, wdh, n, f, m))
			for i := range hv {
				hv[i] += biasV[i%k]
			}
			check(t, "shadow stale (bias after norm) "+name, dt, runs[0].biased, backendtest.MatMulRef(hv, wqh, n, k, m))
			for j, pair := range [][2][]float32{{runs[0].q, runs[1].q}, {runs[0].down, runs[1].down}, {runs[0].biased, runs[1].biased}} {
				for i := range pair[0] {
					if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
						t.Errorf("%s output %d: value %d is %g with shadows, %g without", name, j, i, pair[0][i], pair[1][i])
						break
					}
				}
			}
		}
	}
}

// ensureScratchReset frees the cast scratch (and its shadow), as before a first step.
func (b *Backend) ensureScratchReset() error {
	if err := b.dev.Sync(); err != nil {
		return err
	}
	b.shadow = activationShadow{}
	err := b.free(b.scratch)
	b.scratch = cuda.Buffer{}
	return err
}
