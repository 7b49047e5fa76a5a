package cudabackend

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// SparseMode says when the backend multiplies 2:4 sparse weights through cuSPARSELt.
type SparseMode int

const (
	// SparseAuto compresses every 2:4 linear-layer weight when libcusparseLt loads; without
	// the library the weights run densely, with a log line.
	SparseAuto SparseMode = iota
	// SparseOn is SparseAuto with the library required: a 2:4 weight and no library is an
	// error.
	SparseOn
	// SparseOff multiplies every weight densely (cuSPARSELt is never opened).
	SparseOff
)

var sparseModeNames = [...]string{SparseAuto: "auto", SparseOn: "on", SparseOff: "off"}

// ParseSparseMode reads auto, on or off ("": off, the default: on the H200 the sparse
// products measured slower than the dense ones, so 2:4 is a memory saving asked for).
func ParseSparseMode(s string) (SparseMode, error) {
	if s == "" {
		return SparseOff, nil
	}
	for m, name := range sparseModeNames {
		if s == name {
			return SparseMode(m), nil
		}
	}
	return 0, fmt.Errorf("2:4 sparse mode %q: want auto, on or off", s)
}

// String returns the mode's name as ParseSparseMode reads it.
func (m SparseMode) String() string {
	if m >= 0 && int(m) < len(sparseModeNames) {
		return sparseModeNames[m]
	}
	return fmt.Sprintf("SparseMode(%d)", int(m))
}

// sparseLinear matches the weights the backend may compress: the dense linear layers of
// attention (q, k, v, output) and of the MLP (gate, up, down), the ones `kvasir prune`
// prunes (GGUF names, as model.FP8Linear). The embedding, the output projection and the
// experts are read by kernels of their own and stay dense.
var sparseLinear = regexp.MustCompile(`^blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight$`)

// sparseState is the backend's cuSPARSELt state: the library and handle, opened at the
// first 2:4 weight, the padded operands of its products, and what was compressed.
type sparseState struct {
	mode    SparseMode
	log     io.Writer
	lib     *cuda.CuSPARSELt
	h       *cuda.Sparse
	openErr error // why the library could not be opened (then every weight runs densely)
	tried   bool

	// xPad and dPad hold a product's activations cast to 16 bits and its 16-bit output,
	// SparseBucket(n) rows each (the rows past n are zero or stale: each output row reads
	// only its own input row).
	xPad, dPad cuda.Buffer

	weights    map[*cuda.SparseWeight]bool
	dense      int64          // bytes the compressed weights took densely
	compressed int64          // bytes of the compressed weights
	skipped    map[string]int // 2:4 weights left dense, by reason
	notSparse  int            // linear-layer weights that are not 2:4 (dense, as they are)
}

// sparseHandle opens cuSPARSELt and its handle the first time a 2:4 weight is uploaded
// (inside Run); afterwards it returns the same handle, or the same error.
func (b *Backend) sparseHandle() (*cuda.Sparse, error) {
	s := &b.sparse
	if s.tried {
		return s.h, s.openErr
	}
	s.tried = true
	lib, err := cuda.OpenCuSPARSELt()
	if err == nil {
		s.h, err = b.dev.NewSparse(lib)
	}
	if err != nil {
		s.openErr = fmt.Errorf("cuSPARSELt unavailable: %w", err)
		return nil, s.openErr
	}
	s.lib = lib
	fmt.Fprintf(s.log, "cuda: %s: 2:4 sparse weights are multiplied by cusparseLtMatmul\n", lib.Describe())
	return s.h, nil
}

// skip counts a 2:4 weight left dense for reason, logging the first of each reason.
func (s *sparseState) skip(name, reason string) {
	if s.skipped == nil {
		s.skipped = map[string]int{}
	}
	if s.skipped[reason] == 0 {
		fmt.Fprintf(s.log, "cuda: 2:4 weight %s runs densely: %s\n", name, reason)
	}
	s.skipped[reason]++
}

// uploadSparse uploads a 2:4 sparse linear-layer weight of dt (F16 or BF16) compressed for
// cuSPARSELt, without keeping its dense copy (inside Run). It returns nil, nil when the
// weight is to be uploaded densely: the mode is off, the tensor is not a linear layer's
// or not 2:4, or (in auto mode) the library or the weight's shape does not allow it.
func (b *Backend) uploadSparse(t *format.Tensor, dt cuda.DType, rows, cols int) (*tensor, error) {
	s := &b.sparse
	if s.mode == SparseOff || !sixteenBit(dt) || !sparseLinear.MatchString(t.Name) {
		return nil, nil
	}
	data := t.Data[:dt.BytesOf(rows*cols)]
	ok, negZero := cuda.Is2of4(data, cols)
	if !ok {
		s.notSparse++
		return nil, nil
	}
	h, err := b.sparseHandle()
	if err != nil {
		if s.mode == SparseOn {
			return nil, fmt.Errorf("tensor %q is 2:4 sparse and 2:4 products are on: %w", t.Name, err)
		}
		s.skip(t.Name, err.Error())
		return nil, nil
	}
	if why := cuda.SparseShapeOK(dt, rows, cols); why != "" {
		s.skip(t.Name, why)
		return nil, nil
	}
	if negZero {
		data = cuda.ZeroNegatives(data)
	}
	dense, err := b.dev.Alloc(dt, rows*cols)
	if err != nil {
		return nil, err
	}
	var sw *cuda.SparseWeight
	err = cuda.Upload(b.dev, dense, data)
	if err == nil {
		sw, err = h.Compress(dense, rows, cols)
	}
	if ferr := b.dev.Free(dense); err == nil {
		err = ferr
	}
	if err != nil {
		if sw != nil {
			h.FreeSparseWeight(sw)
		}
		if s.mode == SparseOn {
			return nil, err
		}
		s.skip(t.Name, err.Error())
		return nil, nil
	}
	if s.weights == nil {
		s.weights = map[*cuda.SparseWeight]bool{}
	}
	s.weights[sw] = true
	s.dense += int64(len(data))
	s.compressed += int64(sw.Bytes)
	// buf keeps the weight's type and length for the shape checks; it has no memory.
	return &tensor{buf: cuda.Buffer{DType: dt, Len: rows * cols}, shape: []int{rows, cols}, sparse: sw}, nil
}

// freeSparse releases a compressed weight (inside Run).
func (b *Backend) freeSparse(sw *cuda.SparseWeight) error {
	s := &b.sparse
	if !s.weights[sw] {
		return fmt.Errorf("cuda free: a 2:4 weight the backend did not compress")
	}
	delete(s.weights, sw)
	s.dense -= 2 * int64(sw.Rows*sw.Cols)
	s.compressed -= int64(sw.Bytes)
	return firstErr(b.dropGraphs(), s.h.FreeSparseWeight(sw))
}

// closeSparse frees the compressed weights and the handle (inside Run, from Close).
func (b *Backend) closeSparse() error {
	s := &b.sparse
	if s.h == nil {
		return nil
	}
	var errs []error
	for sw := range s.weights {
		errs = append(errs, s.h.FreeSparseWeight(sw))
	}
	s.weights = nil
	errs = append(errs, b.dev.FreeSparse(s.h))
	s.h = nil
	return firstErr(errs...)
}

// SparseSummary says how many weights are multiplied through cuSPARSELt and the memory
// they take, which 2:4 weights run densely and why, and how many linear-layer weights are
// not 2:4 ("" when no weight was 2:4: a dense model says nothing).
func (b *Backend) SparseSummary() string {
	var out string
	_ = b.dev.Do(func() error {
		s := &b.sparse
		var parts []string
		if n := len(s.weights); n > 0 {
			parts = append(parts, fmt.Sprintf("%d weights compressed (%.1f MB, %.1f MB dense: %.1f MB saved)", n,
				float64(s.compressed)/1e6, float64(s.dense)/1e6, float64(s.dense-s.compressed)/1e6))
		}
		reasons := make([]string, 0, len(s.skipped))
		for r := range s.skipped {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			parts = append(parts, fmt.Sprintf("%d run densely: %s", s.skipped[r], r))
		}
		if len(parts) > 0 && s.notSparse > 0 {
			parts = append(parts, fmt.Sprintf("%d linear-layer weights are not 2:4 and run densely", s.notSparse))
		}
		if len(parts) > 0 {
			out = "cuda 2:4 sparse weights (" + s.mode.String() + "): " + strings.Join(parts, "; ")
		}
		return nil
	})
	return out
}

// sparseBytes is the device memory of the compressed weights.
func (b *Backend) sparseBytes() int64 { return b.sparse.compressed }

// matMulSparse computes y = x · wᵀ for n rows of float32 x into float32 y through
// cuSPARSELt (inside Run): x is cast to the weight's type into the padded input (the
// product runs on SparseBucket(n) rows), and the 16-bit product's first n rows widened
// into y.
func (b *Backend) matMulSparse(y, x cuda.Buffer, w *tensor, n int) error {
	s, sw := &b.sparse, w.sparse
	m, k, dt := sw.Rows, sw.Cols, sw.DType
	rows := cuda.SparseBucket(n)
	for _, p := range []struct {
		buf  *cuda.Buffer
		n    int
		what string
	}{{&s.xPad, rows * k, "2:4 product input"}, {&s.dPad, rows * m, "2:4 product output"}} {
		old := p.buf.Ptr
		if err := b.grow(p.buf, cuda.BF16, p.n, p.n, p.what); err != nil {
			return err
		}
		if p.buf.Ptr != old {
			// The rows past a product's n are read: keep them finite.
			if err := b.dev.Fill32(*p.buf, 0); err != nil {
				return err
			}
		}
	}
	xc, err := b.castInput(x, n*k, dt)
	if err != nil {
		return err
	}
	xp := cuda.Buffer{Ptr: s.xPad.Ptr, DType: dt, Len: rows * k}
	dp := cuda.Buffer{Ptr: s.dPad.Ptr, DType: dt, Len: rows * m}
	if err := b.dev.CopyAsync(cuda.Buffer{Ptr: xp.Ptr, DType: dt, Len: n * k}, xc); err != nil {
		return err
	}
	moves := s.h.Moves()
	if err := b.ops.SparseMatMulT(s.h, dp, xp, sw, rows); err != nil {
		return err
	}
	if s.h.Moves() != moves {
		// A new plan grew the workspace the captured graphs' products use.
		if err := b.dropGraphs(); err != nil {
			return err
		}
	}
	return b.ops.Widen(cuda.Buffer{Ptr: y.Ptr, DType: cuda.F32, Len: n * m}, cuda.Buffer{Ptr: dp.Ptr, DType: dt, Len: n * m})
}
