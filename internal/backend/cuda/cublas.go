package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// CuBLAS holds cuBLAS entry points, bound from libcublas.
type CuBLAS struct {
	lib *library

	cublasCreate         func(h *uintptr) int32
	cublasDestroy        func(h uintptr) int32
	cublasSetStream      func(h, s uintptr) int32
	cublasSetMathMode    func(h uintptr, mode int32) int32
	cublasSetWorkspace   func(h uintptr, ws uint64, size uint64) int32
	cublasGetStatusName  func(r int32) *byte
	cublasGetStatusStr   func(r int32) *byte
	cublasGemmEx         func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uint64, at int32, lda int32, b uint64, bt int32, ldb int32, beta unsafe.Pointer, c uint64, ct int32, ldc int32, compute int32, algo int32) int32
	cublasGetVersion     func(h uintptr, v *int32) int32
	cublasLibraryVersion int
}

// cuBLAS and CUDA data-type constants (cublas_api.h, library_types.h).
const (
	cublasOpN          = 0
	cublasOpT          = 1
	cublasDefaultMath  = 0
	cublasCompute32F   = 68
	cublasGemmDefault  = -1
	cudaR32F           = 0
	cudaR16F           = 2
	cudaR16BF          = 14
	cublasWorkspaceLen = 32 << 20
)

// OpenCuBLAS loads libcublas.so.13, .12 or the unversioned library.
func OpenCuBLAS() (*CuBLAS, error) {
	lib, err := openLibrary("cuBLAS", []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
	if err != nil {
		return nil, err
	}
	b := &CuBLAS{lib: lib}
	err = lib.bind([]symbol{
		{&b.cublasCreate, "cublasCreate_v2"},
		{&b.cublasDestroy, "cublasDestroy_v2"},
		{&b.cublasSetStream, "cublasSetStream_v2"},
		{&b.cublasSetMathMode, "cublasSetMathMode"},
		{&b.cublasSetWorkspace, "cublasSetWorkspace_v2"},
		{&b.cublasGetStatusName, "cublasGetStatusName"},
		{&b.cublasGetStatusStr, "cublasGetStatusString"},
		{&b.cublasGemmEx, "cublasGemmEx"},
		{&b.cublasGetVersion, "cublasGetVersion_v2"},
	})
	if err != nil {
		return nil, fmt.Errorf("cuBLAS %s: %w", lib.name, err)
	}
	return b, nil
}

func (b *CuBLAS) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: cGoString(b.cublasGetStatusName(r)), Msg: cGoString(b.cublasGetStatusStr(r))}
}

// BLAS is a cuBLAS handle bound to a device's stream, with its own workspace so that its
// GEMMs can be captured into CUDA graphs.
type BLAS struct {
	lib       *CuBLAS
	h         uintptr
	workspace Buffer
	dev       *Device // whose stream-work count (seq) each GEMM advances
	// Version is cuBLAS's version number, e.g. 130000.
	Version int
}

// NewBLAS creates a cuBLAS handle on dv's stream (inside Do).
func (dv *Device) NewBLAS(lib *CuBLAS) (*BLAS, error) {
	b := &BLAS{lib: lib, dev: dv}
	if err := lib.check("cublasCreate_v2", lib.cublasCreate(&b.h)); err != nil {
		return nil, err
	}
	ws, err := dv.Alloc(I32, cublasWorkspaceLen/4)
	if err != nil {
		lib.cublasDestroy(b.h)
		return nil, err
	}
	b.workspace = ws
	var v int32
	for _, step := range []struct {
		call string
		r    func() int32
	}{
		{"cublasSetStream_v2", func() int32 { return lib.cublasSetStream(b.h, dv.stream) }},
		{"cublasSetWorkspace_v2", func() int32 { return lib.cublasSetWorkspace(b.h, ws.Ptr, uint64(ws.Bytes())) }},
		{"cublasSetMathMode", func() int32 { return lib.cublasSetMathMode(b.h, cublasDefaultMath) }},
		{"cublasGetVersion_v2", func() int32 { return lib.cublasGetVersion(b.h, &v) }},
	} {
		if err := lib.check(step.call, step.r()); err != nil {
			dv.FreeBLAS(b)
			return nil, err
		}
	}
	b.Version = int(v)
	return b, nil
}

// FreeBLAS destroys the handle and its workspace (inside Do).
func (dv *Device) FreeBLAS(b *BLAS) error {
	if b == nil || b.h == 0 {
		return nil
	}
	err := b.lib.check("cublasDestroy_v2", b.lib.cublasDestroy(b.h))
	b.h = 0
	if ferr := dv.Free(b.workspace); err == nil {
		err = ferr
	}
	return err
}

// cudaType maps a dtype to cuBLAS's data type.
func cudaType(t DType) (int32, error) {
	switch t {
	case F32:
		return cudaR32F, nil
	case F16:
		return cudaR16F, nil
	case BF16:
		return cudaR16BF, nil
	}
	return 0, fmt.Errorf("cublas: dtype %s is not supported", t)
}

// MatMulT computes y = x · Wᵀ on the stream (inside Do): x is [n][k] row-major, w is a
// row-major weight [m][k] (m output features), y is [n][m]. x and w must share a dtype
// (BF16, F16 or F32); y may be F32 or the input dtype. Accumulation is in float32.
func (b *BLAS) MatMulT(y, x, w Buffer, n, k, m int) error {
	return b.MatMulTStrided(y, x, w, n, k, m, m)
}

// MatMulTStrided is MatMulT writing row i of y at y[i*ldy:] (ldy >= m): the product fills
// a block of m columns of a wider row-major y.
func (b *BLAS) MatMulTStrided(y, x, w Buffer, n, k, m, ldy int) error {
	if n <= 0 || k <= 0 || m <= 0 || ldy < m {
		return fmt.Errorf("cublas matmul: bad shape n=%d k=%d m=%d ldy=%d", n, k, m, ldy)
	}
	if x.Len < n*k || w.Len < m*k || y.Len < (n-1)*ldy+m {
		return fmt.Errorf("cublas matmul: buffers x=%d w=%d y=%d elements for n=%d k=%d m=%d ldy=%d", x.Len, w.Len, y.Len, n, k, m, ldy)
	}
	if x.DType != w.DType {
		return fmt.Errorf("cublas matmul: x is %s, w is %s", x.DType, w.DType)
	}
	if y.DType != F32 && y.DType != x.DType {
		return fmt.Errorf("cublas matmul: y is %s for %s inputs", y.DType, x.DType)
	}
	it, err := cudaType(x.DType)
	if err != nil {
		return err
	}
	ot, err := cudaType(y.DType)
	if err != nil {
		return err
	}
	// Column-major view: Yᵀ (m×n) = W (m×k, stored as Wᵀ col-major, so op T) · Xᵀ (k×n).
	alpha, beta := float32(1), float32(0)
	b.dev.seq++
	r := b.lib.cublasGemmEx(b.h, cublasOpT, cublasOpN, int32(m), int32(n), int32(k),
		unsafe.Pointer(&alpha), w.Ptr, it, int32(k), x.Ptr, it, int32(k),
		unsafe.Pointer(&beta), y.Ptr, ot, int32(ldy), cublasCompute32F, cublasGemmDefault)
	runtime.KeepAlive(&alpha)
	runtime.KeepAlive(&beta)
	if err := b.lib.check("cublasGemmEx", r); err != nil {
		return fmt.Errorf("matmul n=%d k=%d m=%d %s->%s: %w", n, k, m, x.DType, y.DType, err)
	}
	return nil
}
