package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// matMulOperands checks out = x · wᵀ for one weight and returns the device tensors.
func matMulOperands(op string, out *tensor, xs *tensor, w backend.Tensor, i int) (*tensor, error) {
	wm, err := devWeight(op, fmt.Sprintf("w[%d]", i), w)
	if err != nil {
		return nil, err
	}
	if len(wm.shape) != 2 || xs.cols() != wm.cols() || out.cols() != wm.rows() || out.rows() != xs.rows() {
		return nil, fmt.Errorf("cuda %s: out[%d] %v = x %v · w[%d] %vᵀ", op, i, out.shape, xs.shape, i, wm.shape)
	}
	return wm, nil
}

// MatMuls computes outs[i] = x · ws[i]ᵀ for every i (backend.MultiMatMuler). For up to
// cuda.GEMVMaxRows rows of 16-bit weights of one type, or of each run of quantized weights
// of one block type (all of them, or q and k beside a v of another type) in the split
// layout, one GEMV launch covers up to three weights (a grid over their concatenated rows);
// for more rows of 16-bit weights x is cast to the weights' type once and each weight runs
// its own cuBLAS GEMM. Other weights run MatMul's path one by one.
func (b *Backend) MatMuls(outs []backend.Tensor, x backend.Tensor, ws []backend.Tensor) error {
	const op = "matmuls"
	if len(outs) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("cuda %s: %d outputs for %d weights", op, len(outs), len(ws))
	}
	xs, err := devTensor(op, "x", x, cuda.F32)
	if err != nil {
		return err
	}
	ys := make([]*tensor, len(ws))
	wms := make([]*tensor, len(ws))
	same := true // every weight 16-bit of the first one's type, none 2:4 compressed
	for i := range ws {
		if ys[i], err = devTensor(op, fmt.Sprintf("out[%d]", i), outs[i], cuda.F32); err != nil {
			return err
		}
		if wms[i], err = matMulOperands(op, ys[i], xs, ws[i], i); err != nil {
			return err
		}
		same = same && sixteenBit(wms[i].buf.DType) && wms[i].buf.DType == wms[0].buf.DType && wms[i].sparse == nil
	}
	n, k := xs.rows(), xs.cols()
	if !same {
		// Each run of quantized weights of one block type shares a launch; the rest go
		// one by one.
		for i := 0; i < len(ws); {
			j := i + 1
			for j < len(ws) && b.quantMulti(wms[i:j+1], n) {
				j++
			}
			if j-i > 1 {
				bufs := make([]cuda.Buffer, 0, j-i)
				for _, y := range ys[i:j] {
					bufs = append(bufs, y.buf)
				}
				if err := b.matMulsQuantized(bufs, xs.buf, wms[i:j], n); err != nil {
					return err
				}
			} else if err := b.matMul(ys[i].buf, xs.buf, wms[i], n); err != nil {
				return err
			}
			i = j
		}
		return nil
	}
	dt := wms[0].buf.DType
	if n <= cuda.GEMVMaxRows && k%8 == 0 {
		for g := 0; g < len(ws); g += cuda.GEMVMulti {
			var y [cuda.GEMVMulti]cuda.Buffer
			var w [cuda.GEMVMulti]cuda.Buffer
			var m [cuda.GEMVMulti]int
			for j := 0; j < cuda.GEMVMulti; j++ {
				y[j], w[j] = ys[g].buf, wms[g].buf // unused slots repeat a valid pointer with m = 0
				if g+j < len(ws) {
					y[j], w[j], m[j] = ys[g+j].buf, wms[g+j].buf, wms[g+j].rows()
				}
			}
			if err := b.ops.GEMVMulti(y, xs.buf, w, n, k, m); err != nil {
				return err
			}
		}
		return nil
	}
	xc, err := b.castInput(xs.buf, n*k, dt)
	if err != nil {
		return err
	}
	for i := range ws {
		if err := b.ops.MatMulT(ys[i].buf, xc, wms[i].buf, n, k, wms[i].rows()); err != nil {
			return err
		}
	}
	return nil
}

// MatMulSwiGLU computes out = silu(x · gateᵀ) * (x · upᵀ) (backend.SwiGLUMatMuler). For up
// to cuda.GEMVMaxRows rows of 16-bit weights, one GEMV launch computes the same rows of gate and
// up and writes only their SwiGLU; for more rows x is cast once, cuBLAS writes the gate
// product into out and the up product into a scratch buffer, and the SwiGLU kernel
// combines them in place.
func (b *Backend) MatMulSwiGLU(out, x, gate, up backend.Tensor) error {
	const op = "matmul swiglu"
	o, err := devTensor(op, "out", out, cuda.F32)
	if err != nil {
		return err
	}
	xs, err := devTensor(op, "x", x, cuda.F32)
	if err != nil {
		return err
	}
	g, err := matMulOperands(op, o, xs, gate, 0)
	if err != nil {
		return err
	}
	u, err := matMulOperands(op, o, xs, up, 1)
	if err != nil {
		return err
	}
	n, k, m := xs.rows(), xs.cols(), g.rows()
	dt := g.buf.DType
	dense := g.sparse == nil && u.sparse == nil // 2:4 weights go through matMul
	if dense && sixteenBit(dt) && dt == u.buf.DType && n <= cuda.GEMVMaxRows && k%8 == 0 {
		return b.ops.GEMVSwiGLU(o.buf, xs.buf, g.buf, u.buf, n, k, m)
	}
	if err := b.grow(&b.gluScratch, cuda.F32, n*m, n*m, op+" scratch"); err != nil {
		return err
	}
	upOut := cuda.Buffer{Ptr: b.gluScratch.Ptr, DType: cuda.F32, Len: n * m}
	if dense && sixteenBit(dt) && dt == u.buf.DType {
		// The scratch holds x's cast and then the SwiGLU's shadow: size it for both
		// first, so that growing it cannot drop the cast.
		if b.shadows && !b.capturing {
			if err := b.ensureScratch(max(n*k, n*m)); err != nil {
				return err
			}
		}
		xc, err := b.castInput(xs.buf, n*k, dt)
		if err != nil {
			return err
		}
		if err := firstErr(b.ops.MatMulT(o.buf, xc, g.buf, n, k, m), b.ops.MatMulT(upOut, xc, u.buf, n, k, m)); err != nil {
			return err
		}
		if b.shadows && b.scratch.Len >= n*m {
			sh := cuda.Buffer{Ptr: b.scratch.Ptr, DType: dt, Len: n * m}
			if err := b.ops.SwiGLUShadow(o.buf, sh, o.buf, upOut, n*m); err != nil {
				return err
			}
			b.setShadow(o.buf.Ptr, n*m, dt)
			return nil
		}
	} else if b.quantMulti([]*tensor{g, u}, n) {
		if err := b.matMulsQuantized([]cuda.Buffer{o.buf, upOut}, xs.buf, []*tensor{g, u}, n); err != nil {
			return err
		}
		if b.x8Target(n, m) {
			return b.ops.SwiGLUX8(o.buf, o.buf, upOut, n*m)
		}
	} else if err := firstErr(b.matMul(o.buf, xs.buf, g, n), b.matMul(upOut, xs.buf, u, n)); err != nil {
		return err
	}
	return b.ops.SwiGLU(o.buf, o.buf, upOut, n, m, m)
}

// quantMulti reports whether the weights go to the GPU in one multi-weight launch of the
// quantized GEMV: n rows a GEMV takes and one block type for all.
func (b *Backend) quantMulti(ws []*tensor, n int) bool {
	if n > cuda.GEMVMaxRows {
		return false
	}
	for _, w := range ws {
		if !cuda.Quantized(w.buf.DType) || w.buf.DType != ws[0].buf.DType {
			return false
		}
	}
	return true
}

// matMulsQuantized computes ys[i] = x · ws[i]ᵀ for quantized weights of one block type
// (quantMulti), up to cuda.GEMVMulti weights a launch (inside Run).
func (b *Backend) matMulsQuantized(ys []cuda.Buffer, x cuda.Buffer, ws []*tensor, n int) error {
	k := ws[0].cols()
	for g := 0; g < len(ws); g += cuda.GEMVMulti {
		var y, w [cuda.GEMVMulti]cuda.Buffer
		var m [cuda.GEMVMulti]int
		for j := range cuda.GEMVMulti {
			y[j], w[j] = ys[g], ws[g].buf // unused slots repeat a valid pair with m = 0
			if g+j < len(ws) {
				y[j], w[j], m[j] = ys[g+j], ws[g+j].buf, ws[g+j].rows()
			}
		}
		if err := b.ops.GEMVQMultiWith(b.quantGEMV, y, x, w, n, k, m); err != nil {
			return err
		}
	}
	return nil
}

// Compile-time checks of the optional interfaces.
var (
	_ backend.MultiMatMuler  = (*Backend)(nil)
	_ backend.SwiGLUMatMuler = (*Backend)(nil)
)
