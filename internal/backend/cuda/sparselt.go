package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// CuSPARSELt holds the cuSPARSELt entry points (2:4 structured-sparse GEMM), bound from
// libcusparseLt. The C API is that of cusparseLt.h: every object (handle, matrix, matmul
// and algorithm descriptors, plan) is an opaque fixed-size struct the caller allocates and
// passes by pointer; statuses are cuSPARSE's cusparseStatus_t.
type CuSPARSELt struct {
	lib *library
	// Major, Minor, Patch are the library's version (cusparseLtGetProperty).
	Major, Minor, Patch int
	// Compress names the compression entry points bound: the descriptor-based
	// cusparseLtSpMMACompressedSize2/Compress2 when the library has them, else the
	// plan-based cusparseLtSpMMACompressedSize/Compress.
	Compress string

	ltInit            func(h unsafe.Pointer) int32
	ltDestroy         func(h unsafe.Pointer) int32
	ltGetProperty     func(prop int32, v *int32) int32
	ltDenseInit       func(h, d unsafe.Pointer, rows, cols, ld int64, align uint32, vt, order int32) int32
	ltStructuredInit  func(h, d unsafe.Pointer, rows, cols, ld int64, align uint32, vt, order, sparsity int32) int32
	ltMatDestroy      func(d unsafe.Pointer) int32
	ltMatmulInit      func(h, md unsafe.Pointer, opA, opB int32, a, b, c, d unsafe.Pointer, compute int32) int32
	ltAlgInit         func(h, alg, md unsafe.Pointer, algo int32) int32
	ltPlanInit        func(h, plan, md, alg unsafe.Pointer) int32
	ltPlanDestroy     func(plan unsafe.Pointer) int32
	ltGetWorkspace    func(h, plan unsafe.Pointer, size *uint64) int32
	ltMatmul          func(h, plan, alpha unsafe.Pointer, a, b uint64, beta unsafe.Pointer, c, d, ws uint64, streams *uintptr, nStreams int32) int32
	ltCompressedSize2 func(h, desc unsafe.Pointer, size, bufSize *uint64) int32
	ltCompress2       func(h, desc unsafe.Pointer, isSparseA, op int32, dense, compressed, buf uint64, stream uintptr) int32
	ltCompressedSize  func(h, plan unsafe.Pointer, size, bufSize *uint64) int32
	ltCompress        func(h, plan unsafe.Pointer, dense, compressed, buf uint64, stream uintptr) int32
	// Optional: cusparseLtMatmulAlgSelectionDestroy (0.8 and later must call it),
	// cusparseLtSpMMAPruneCheck2 (checks a matrix's pattern on the device), and the error
	// names (0.8 and later; before, a table of cuSPARSE's statuses).
	ltAlgDestroy  func(alg unsafe.Pointer) int32
	ltPruneCheck2 func(h, desc unsafe.Pointer, isSparseA, op int32, dense, valid uint64, stream uintptr) int32
	ltErrorName   func(r int32) *byte
	ltErrorString func(r int32) *byte
}

// cuSPARSELt and cuSPARSE constants (cusparseLt.h, cusparse.h, library_types.h).
const (
	sparseOpN          = 0 // CUSPARSE_OPERATION_NON_TRANSPOSE
	sparseOpT          = 1 // CUSPARSE_OPERATION_TRANSPOSE
	sparseOrderCol     = 1 // CUSPARSE_ORDER_COL
	sparseOrderRow     = 2 // CUSPARSE_ORDER_ROW
	sparsity50         = 0 // CUSPARSELT_SPARSITY_50_PERCENT
	sparseAlgDefault   = 0 // CUSPARSELT_MATMUL_ALG_DEFAULT
	sparseCompute32F   = 2 // CUSPARSE_COMPUTE_32F (0.5 and later: 32I = 0, 16F = 1, 32F = 2)
	propMajor          = 0 // MAJOR_VERSION (libraryPropertyType)
	propMinor          = 1 // MINOR_VERSION
	propPatch          = 2 // PATCH_LEVEL
	sparseAlignment    = 16
	ltOpaqueBytes      = 16 << 10 // more than any release's opaque structs (0.4: 11,024 bytes; later 1,024 or 512)
	sparseMinMinor     = 6        // 0.6.0 and later: the compute-type numbering above
	sparseDimMultiple  = 32       // rows and columns of a structured 16-bit matrix: a multiple of this
	sparseBucketMin    = 16       // the fewest columns of the dense operand a plan is made for
	sparseStatusNoName = "CUSPARSE_STATUS_UNKNOWN"
)

// sparseStatusNames are cuSPARSE's cusparseStatus_t names, for libraries without
// cusparseLtGetErrorName.
var sparseStatusNames = []string{"CUSPARSE_STATUS_SUCCESS", "CUSPARSE_STATUS_NOT_INITIALIZED", "CUSPARSE_STATUS_ALLOC_FAILED",
	"CUSPARSE_STATUS_INVALID_VALUE", "CUSPARSE_STATUS_ARCH_MISMATCH", "CUSPARSE_STATUS_MAPPING_ERROR",
	"CUSPARSE_STATUS_EXECUTION_FAILED", "CUSPARSE_STATUS_INTERNAL_ERROR", "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
	"CUSPARSE_STATUS_ZERO_PIVOT", "CUSPARSE_STATUS_NOT_SUPPORTED", "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES"}

// CuSPARSELtNames are the library names OpenCuSPARSELt tries, in order.
var CuSPARSELtNames = []string{"libcusparseLt.so.0", "libcusparseLt.so"}

// wheelCuSPARSELt lists the libcusparseLt.so.0 of the Python wheels (nvidia-cusparselt-cu*)
// in the system's site-packages, which the loader does not search.
func wheelCuSPARSELt() []string {
	var out []string
	for _, pat := range []string{"/usr/local/lib/python3*/*-packages", "/usr/lib/python3*/*-packages", "/opt/*/lib/python3*/site-packages"} {
		dirs, _ := filepath.Glob(pat)
		for _, d := range dirs {
			p := filepath.Join(d, "nvidia", "cusparselt", "lib", CuSPARSELtNames[0])
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// OpenCuSPARSELt loads libcusparseLt (CuSPARSELtNames through the loader's path and the
// CUDA folders, then a Python wheel's copy), binds its entry points and reads its
// version. Versions before 0.6 are refused: their compute-type enumeration differs.
func OpenCuSPARSELt() (*CuSPARSELt, error) {
	lib, err := openLibrary("cuSPARSELt", append(slices.Clone(CuSPARSELtNames), wheelCuSPARSELt()...))
	if err != nil {
		return nil, err
	}
	s := &CuSPARSELt{lib: lib}
	err = lib.bind([]symbol{
		{&s.ltInit, "cusparseLtInit"},
		{&s.ltDestroy, "cusparseLtDestroy"},
		{&s.ltGetProperty, "cusparseLtGetProperty"},
		{&s.ltDenseInit, "cusparseLtDenseDescriptorInit"},
		{&s.ltStructuredInit, "cusparseLtStructuredDescriptorInit"},
		{&s.ltMatDestroy, "cusparseLtMatDescriptorDestroy"},
		{&s.ltMatmulInit, "cusparseLtMatmulDescriptorInit"},
		{&s.ltAlgInit, "cusparseLtMatmulAlgSelectionInit"},
		{&s.ltPlanInit, "cusparseLtMatmulPlanInit"},
		{&s.ltPlanDestroy, "cusparseLtMatmulPlanDestroy"},
		{&s.ltGetWorkspace, "cusparseLtMatmulGetWorkspace"},
		{&s.ltMatmul, "cusparseLtMatmul"},
	})
	if err != nil {
		return nil, fmt.Errorf("cuSPARSELt %s: %w", lib.name, err)
	}
	switch {
	case lib.bindOptional(&s.ltCompressedSize2, "cusparseLtSpMMACompressedSize2") && lib.bindOptional(&s.ltCompress2, "cusparseLtSpMMACompress2"):
		s.Compress = "cusparseLtSpMMACompressedSize2/cusparseLtSpMMACompress2"
	case lib.bindOptional(&s.ltCompressedSize, "cusparseLtSpMMACompressedSize") && lib.bindOptional(&s.ltCompress, "cusparseLtSpMMACompress"):
		s.ltCompressedSize2, s.ltCompress2 = nil, nil
		s.Compress = "cusparseLtSpMMACompressedSize/cusparseLtSpMMACompress"
	default:
		return nil, fmt.Errorf("cuSPARSELt %s: neither cusparseLtSpMMACompress2 nor cusparseLtSpMMACompress is exported", lib.name)
	}
	lib.bindOptional(&s.ltAlgDestroy, "cusparseLtMatmulAlgSelectionDestroy")
	lib.bindOptional(&s.ltPruneCheck2, "cusparseLtSpMMAPruneCheck2")
	if !lib.bindOptional(&s.ltErrorName, "cusparseLtGetErrorName") || !lib.bindOptional(&s.ltErrorString, "cusparseLtGetErrorString") {
		s.ltErrorName, s.ltErrorString = nil, nil
	}
	var v [3]int32
	for i, p := range []int32{propMajor, propMinor, propPatch} {
		if err := s.check("cusparseLtGetProperty", s.ltGetProperty(p, &v[i])); err != nil {
			return nil, fmt.Errorf("cuSPARSELt %s: %w", lib.name, err)
		}
	}
	s.Major, s.Minor, s.Patch = int(v[0]), int(v[1]), int(v[2])
	if s.Major == 0 && s.Minor < sparseMinMinor {
		return nil, fmt.Errorf("cuSPARSELt %s is version %s: kvasir needs 0.%d or later", lib.name, s.Version(), sparseMinMinor)
	}
	return s, nil
}

// Version returns the library's version as major.minor.patch.
func (s *CuSPARSELt) Version() string { return fmt.Sprintf("%d.%d.%d", s.Major, s.Minor, s.Patch) }

// Describe says which library was opened and which of its optional entry points were
// found, for a start-up log.
func (s *CuSPARSELt) Describe() string {
	var opt []string
	for _, f := range []struct {
		ok   bool
		name string
	}{{s.ltAlgDestroy != nil, "cusparseLtMatmulAlgSelectionDestroy"}, {s.ltPruneCheck2 != nil, "cusparseLtSpMMAPruneCheck2"},
		{s.ltErrorName != nil, "cusparseLtGetErrorName"}} {
		if f.ok {
			opt = append(opt, f.name)
		}
	}
	if len(opt) == 0 {
		opt = []string{"nothing optional"}
	}
	return fmt.Sprintf("cuSPARSELt %s (%s; %s; also %s)", s.Version(), s.lib.name, s.Compress, strings.Join(opt, ", "))
}

func (s *CuSPARSELt) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: sparseStatusNoName}
	if s.ltErrorName != nil {
		e.Name, e.Msg = cGoString(s.ltErrorName(r)), cGoString(s.ltErrorString(r))
	} else if int(r) < len(sparseStatusNames) {
		e.Name = sparseStatusNames[r]
	}
	return e
}

// bindOptional binds the Go function variable ptr to the symbol name when the library
// exports it, and reports whether it does.
func (l *library) bindOptional(ptr any, name string) bool {
	a, err := purego.Dlsym(l.handle, name)
	if err != nil || a == 0 {
		return false
	}
	purego.RegisterFunc(ptr, a)
	return true
}

// ltObject is the memory of one cuSPARSELt opaque struct (handle, descriptor, plan): Go
// memory that is pinned while the library may hold its address.
type ltObject struct{ data [ltOpaqueBytes]byte }

func (o *ltObject) ptr() unsafe.Pointer { return unsafe.Pointer(&o.data[0]) }

// Sparse is a cuSPARSELt handle on a device's stream, with the plans of the products it
// has run: one per weight shape and dense-operand bucket (SparseBucket), shared by every
// weight of that shape, and one workspace as large as the largest plan needs.
type Sparse struct {
	lib       *CuSPARSELt
	dev       *Device
	handle    *ltObject
	pin       runtime.Pinner // the handle and every plan's objects
	plans     map[sparsePlanKey]*sparsePlan
	workspace Buffer
	moves     int     // times the workspace was reallocated (Moves)
	stream    uintptr // cusparseLtMatmul takes an array of streams
}

// sparsePlanKey identifies a plan: the weight's type and shape and the bucket of columns.
type sparsePlanKey struct {
	dt         DType
	m, k, cols int
}

// sparsePlan is one product's descriptors and plan; the plan reads the descriptors, so
// they live as long as it does.
type sparsePlan struct {
	a, b, c, matmul, alg, plan *ltObject
	workspace                  int
}

// NewSparse initializes a cuSPARSELt handle on dv (inside Do).
func (dv *Device) NewSparse(lib *CuSPARSELt) (*Sparse, error) {
	s := &Sparse{lib: lib, dev: dv, handle: new(ltObject), plans: map[sparsePlanKey]*sparsePlan{}, stream: dv.stream}
	s.pin.Pin(s.handle)
	if err := lib.check("cusparseLtInit", lib.ltInit(s.handle.ptr())); err != nil {
		s.pin.Unpin()
		return nil, err
	}
	return s, nil
}

// FreeSparse destroys the plans, the workspace and the handle (inside Do). The weights
// compressed with it must be freed first (FreeSparseWeight).
func (dv *Device) FreeSparse(s *Sparse) error {
	if s == nil || s.handle == nil {
		return nil
	}
	errs := []error{dv.Sync()}
	for k, p := range s.plans {
		errs = append(errs, s.destroyPlan(p))
		delete(s.plans, k)
	}
	errs = append(errs, dv.Free(s.workspace), s.lib.check("cusparseLtDestroy", s.lib.ltDestroy(s.handle.ptr())))
	s.workspace, s.handle = Buffer{}, nil
	s.pin.Unpin()
	return firstErr(errs...)
}

// SparseWeight is a 2:4 structured weight compressed for cuSPARSELt: Rows output features
// of Cols inputs, at most two of every four consecutive inputs of a row nonzero.
type SparseWeight struct {
	DType      DType
	Rows, Cols int
	// Bytes is the compressed matrix's size on the device (values and metadata).
	Bytes      int
	compressed Buffer
	desc       *ltObject
	pin        runtime.Pinner
}

// SparseShapeOK reports why a weight of m rows and k columns of dt cannot be multiplied
// by cuSPARSELt ("" when it can): BF16 or F16, both dimensions multiples of 32.
func SparseShapeOK(dt DType, m, k int) string {
	if dt != BF16 && dt != F16 {
		return fmt.Sprintf("type %s (2:4 products take bf16 or f16 weights)", dt)
	}
	if m <= 0 || k <= 0 || m%sparseDimMultiple != 0 || k%sparseDimMultiple != 0 {
		return fmt.Sprintf("shape %dx%d (2:4 products need both dimensions multiples of %d)", m, k, sparseDimMultiple)
	}
	return ""
}

// SparseBucket returns the columns of the dense operand a product of n rows runs with:
// n rounded up to a multiple of 16 up to 256, then to a power of two or one and a half
// times one (less than half again n), so that few plans cover every batch.
func SparseBucket(n int) int {
	if n <= 256 {
		return max(sparseBucketMin, (n+sparseBucketMin-1)/sparseBucketMin*sparseBucketMin)
	}
	p := pow2Bucket(n)
	if h := p / 4 * 3; h >= n {
		return h
	}
	return p
}

// structured initializes desc as the weight of m rows and k columns, row-major as
// uploaded: the product's A, not transposed, its 2:4 groups along the rows.
func (s *Sparse) structured(desc *ltObject, dt DType, m, k int) error {
	vt, err := cudaType(dt)
	if err != nil {
		return err
	}
	return s.lib.check("cusparseLtStructuredDescriptorInit", s.lib.ltStructuredInit(s.handle.ptr(), desc.ptr(),
		int64(m), int64(k), int64(k), sparseAlignment, vt, sparseOrderRow, sparsity50))
}

// Compress checks that w (m rows of k values of BF16 or F16, row-major) is 2:4 along its
// rows where the library can check it on the device, and returns its compressed form
// (inside Do; it synchronizes the stream). w itself is left as it is: the caller may free
// it once Compress returns.
func (s *Sparse) Compress(w Buffer, m, k int) (*SparseWeight, error) {
	if why := SparseShapeOK(w.DType, m, k); why != "" {
		return nil, fmt.Errorf("cusparselt compress: %s", why)
	}
	if w.Len != m*k {
		return nil, fmt.Errorf("cusparselt compress: %d elements for %dx%d", w.Len, m, k)
	}
	sw := &SparseWeight{DType: w.DType, Rows: m, Cols: k, desc: new(ltObject)}
	sw.pin.Pin(sw.desc)
	if err := s.structured(sw.desc, w.DType, m, k); err != nil {
		sw.pin.Unpin()
		return nil, err
	}
	fail := func(err error) (*SparseWeight, error) {
		s.lib.ltMatDestroy(sw.desc.ptr())
		if sw.compressed.Ptr != 0 {
			s.dev.Free(sw.compressed)
		}
		sw.pin.Unpin()
		return nil, fmt.Errorf("cusparselt compress %dx%d %s: %w", m, k, w.DType, err)
	}
	if s.lib.ltPruneCheck2 != nil {
		if err := s.pruneCheck(sw.desc, w); err != nil {
			return fail(err)
		}
	}
	var size, bufSize uint64
	var plan *sparsePlan
	if s.lib.ltCompressedSize2 != nil {
		if err := s.lib.check("cusparseLtSpMMACompressedSize2", s.lib.ltCompressedSize2(s.handle.ptr(), sw.desc.ptr(), &size, &bufSize)); err != nil {
			return fail(err)
		}
	} else {
		// The plan-based entry points compress for a plan; the layout is the structured
		// descriptor's, the same for every bucket's plan.
		var err error
		if plan, err = s.planFor(w.DType, m, k, sparseBucketMin); err != nil {
			return fail(err)
		}
		if err := s.lib.check("cusparseLtSpMMACompressedSize", s.lib.ltCompressedSize(s.handle.ptr(), plan.plan.ptr(), &size, &bufSize)); err != nil {
			return fail(err)
		}
	}
	var err error
	if sw.compressed, err = s.dev.Alloc(U8, int(size)); err != nil {
		return fail(err)
	}
	sw.Bytes = int(size)
	var tmp Buffer
	if bufSize > 0 {
		if tmp, err = s.dev.Alloc(U8, int(bufSize)); err != nil {
			return fail(err)
		}
	}
	s.dev.seq++
	var r int32
	call := "cusparseLtSpMMACompress2"
	if plan == nil {
		r = s.lib.ltCompress2(s.handle.ptr(), sw.desc.ptr(), 1, sparseOpN, w.Ptr, sw.compressed.Ptr, tmp.Ptr, s.dev.stream)
	} else {
		call = "cusparseLtSpMMACompress"
		r = s.lib.ltCompress(s.handle.ptr(), plan.plan.ptr(), w.Ptr, sw.compressed.Ptr, tmp.Ptr, s.dev.stream)
	}
	err = firstErr(s.lib.check(call, r), s.dev.Sync(), s.dev.Free(tmp))
	if err != nil {
		return fail(err)
	}
	return sw, nil
}

// pruneCheck asks the library whether w follows the 2:4 pattern desc describes (inside
// Do; it synchronizes the stream).
func (s *Sparse) pruneCheck(desc *ltObject, w Buffer) error {
	valid, err := s.dev.Alloc(I32, 1)
	if err != nil {
		return err
	}
	defer s.dev.Free(valid)
	// Zeroed first: a fresh allocation holds whatever was there, and the result is read
	// as "valid" only where the library wrote 0.
	if err := s.dev.Fill32(valid, 0); err != nil {
		return err
	}
	s.dev.seq++
	if err := s.lib.check("cusparseLtSpMMAPruneCheck2", s.lib.ltPruneCheck2(s.handle.ptr(), desc.ptr(), 1, sparseOpN, w.Ptr, valid.Ptr, s.dev.stream)); err != nil {
		return err
	}
	if err := s.dev.Sync(); err != nil {
		return fmt.Errorf("cusparseLtSpMMAPruneCheck2: %w", err)
	}
	v := make([]int32, 1)
	if err := Download(s.dev, v, valid); err != nil {
		return err
	}
	if v[0] != 0 {
		return fmt.Errorf("the matrix is not 2:4 sparse along its rows (cusparseLtSpMMAPruneCheck2 wrote %d)", v[0])
	}
	return nil
}

// FreeSparseWeight releases a compressed weight (inside Do).
func (s *Sparse) FreeSparseWeight(w *SparseWeight) error {
	if w == nil || w.desc == nil {
		return nil
	}
	err := firstErr(s.lib.check("cusparseLtMatDescriptorDestroy", s.lib.ltMatDestroy(w.desc.ptr())), s.dev.Free(w.compressed))
	w.desc, w.compressed = nil, Buffer{}
	w.pin.Unpin()
	return err
}

// planFor returns the plan of the product of a weight of dt, m x k, with cols columns of
// the dense operand, making it (and growing the workspace) the first time (inside Do; not
// during a graph capture).
func (s *Sparse) planFor(dt DType, m, k, cols int) (*sparsePlan, error) {
	key := sparsePlanKey{dt: dt, m: m, k: k, cols: cols}
	if p := s.plans[key]; p != nil {
		return p, nil
	}
	vt, err := cudaType(dt)
	if err != nil {
		return nil, err
	}
	p := &sparsePlan{a: new(ltObject), b: new(ltObject), c: new(ltObject), matmul: new(ltObject), alg: new(ltObject), plan: new(ltObject)}
	for _, o := range []*ltObject{p.a, p.b, p.c, p.matmul, p.alg, p.plan} {
		s.pin.Pin(o)
	}
	// D (m x cols, column-major: cols rows of m values row-major, the output) = A · Bᵀ with
	// A the weight (m x k, row-major) and B the activations (cols x k, row-major), the
	// layout PyTorch's semi-structured linear gives cuSPARSELt.
	h, lib := s.handle.ptr(), s.lib
	var made []func() int32
	undo := func(err error) (*sparsePlan, error) {
		for i := len(made) - 1; i >= 0; i-- {
			made[i]()
		}
		return nil, fmt.Errorf("cusparselt plan %dx%d %s for %d columns: %w", m, k, dt, cols, err)
	}
	if err := s.structured(p.a, dt, m, k); err != nil {
		return undo(err)
	}
	made = append(made, func() int32 { return lib.ltMatDestroy(p.a.ptr()) })
	if err := lib.check("cusparseLtDenseDescriptorInit", lib.ltDenseInit(h, p.b.ptr(), int64(cols), int64(k), int64(k), sparseAlignment, vt, sparseOrderRow)); err != nil {
		return undo(err)
	}
	made = append(made, func() int32 { return lib.ltMatDestroy(p.b.ptr()) })
	if err := lib.check("cusparseLtDenseDescriptorInit", lib.ltDenseInit(h, p.c.ptr(), int64(m), int64(cols), int64(m), sparseAlignment, vt, sparseOrderCol)); err != nil {
		return undo(err)
	}
	made = append(made, func() int32 { return lib.ltMatDestroy(p.c.ptr()) })
	if err := lib.check("cusparseLtMatmulDescriptorInit", lib.ltMatmulInit(h, p.matmul.ptr(), sparseOpN, sparseOpT,
		p.a.ptr(), p.b.ptr(), p.c.ptr(), p.c.ptr(), sparseCompute32F)); err != nil {
		return undo(err)
	}
	if err := lib.check("cusparseLtMatmulAlgSelectionInit", lib.ltAlgInit(h, p.alg.ptr(), p.matmul.ptr(), sparseAlgDefault)); err != nil {
		return undo(err)
	}
	if lib.ltAlgDestroy != nil {
		made = append(made, func() int32 { return lib.ltAlgDestroy(p.alg.ptr()) })
	}
	if err := lib.check("cusparseLtMatmulPlanInit", lib.ltPlanInit(h, p.plan.ptr(), p.matmul.ptr(), p.alg.ptr())); err != nil {
		return undo(err)
	}
	made = append(made, func() int32 { return lib.ltPlanDestroy(p.plan.ptr()) })
	var ws uint64
	if err := lib.check("cusparseLtMatmulGetWorkspace", lib.ltGetWorkspace(h, p.plan.ptr(), &ws)); err != nil {
		return undo(err)
	}
	p.workspace = int(ws)
	if p.workspace > s.workspace.Bytes() {
		// Queued products may still use the old workspace.
		if err := firstErr(s.dev.Sync(), s.dev.Free(s.workspace)); err != nil {
			return undo(err)
		}
		s.workspace = Buffer{}
		s.moves++
		if s.workspace, err = s.dev.Alloc(U8, p.workspace); err != nil {
			return undo(err)
		}
	}
	s.plans[key] = p
	return p, nil
}

// destroyPlan destroys a plan and its descriptors.
func (s *Sparse) destroyPlan(p *sparsePlan) error {
	lib := s.lib
	errs := []error{lib.check("cusparseLtMatmulPlanDestroy", lib.ltPlanDestroy(p.plan.ptr()))}
	if lib.ltAlgDestroy != nil {
		errs = append(errs, lib.check("cusparseLtMatmulAlgSelectionDestroy", lib.ltAlgDestroy(p.alg.ptr())))
	}
	for _, d := range []*ltObject{p.a, p.b, p.c} {
		errs = append(errs, lib.check("cusparseLtMatDescriptorDestroy", lib.ltMatDestroy(d.ptr())))
	}
	return firstErr(errs...)
}

// Plans returns how many plans the handle holds.
func (s *Sparse) Plans() int { return len(s.plans) }

// Moves returns how many times the shared workspace has been reallocated (a new plan
// needing more): a captured graph holds its address, so a change invalidates graphs.
func (s *Sparse) Moves() int { return s.moves }

// MatMulT computes d = b · wᵀ on the stream (inside Do) for a compressed weight w of m rows
// and k columns: b holds cols rows of k values and d cols rows of m values, both row-major
// in w's type, cols a SparseBucket value. Accumulation is in float32. The first product of
// a shape and bucket makes its plan, which must not happen during a graph capture.
func (s *Sparse) MatMulT(d, b Buffer, w *SparseWeight, cols int) error {
	if w == nil || w.desc == nil {
		return fmt.Errorf("cusparselt matmul: no compressed weight")
	}
	m, k := w.Rows, w.Cols
	if cols < sparseBucketMin || cols%sparseBucketMin != 0 {
		return fmt.Errorf("cusparselt matmul: %d columns (want a multiple of %d)", cols, sparseBucketMin)
	}
	if b.DType != w.DType || d.DType != w.DType {
		return fmt.Errorf("cusparselt matmul: b is %s, d is %s for a %s weight", b.DType, d.DType, w.DType)
	}
	if b.Len < cols*k || d.Len < cols*m {
		return fmt.Errorf("cusparselt matmul: buffers b=%d d=%d elements for %d columns of %dx%d", b.Len, d.Len, cols, m, k)
	}
	p, err := s.planFor(w.DType, m, k, cols)
	if err != nil {
		return err
	}
	alpha, beta := float32(1), float32(0)
	s.dev.seq++
	r := s.lib.ltMatmul(s.handle.ptr(), p.plan.ptr(), unsafe.Pointer(&alpha), w.compressed.Ptr, b.Ptr,
		unsafe.Pointer(&beta), d.Ptr, d.Ptr, s.workspace.Ptr, &s.stream, 1)
	runtime.KeepAlive(&alpha)
	runtime.KeepAlive(&beta)
	if err := s.lib.check("cusparseLtMatmul", r); err != nil {
		return fmt.Errorf("cusparselt matmul %d columns of %dx%d %s: %w", cols, m, k, w.DType, err)
	}
	return nil
}
