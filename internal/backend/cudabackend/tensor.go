package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// tensor is a device tensor of the Backend: a Buffer with its shape. Views (Rows) share
// the buffer's memory and are never freed themselves.
type tensor struct {
	buf   cuda.Buffer
	shape []int
	view  bool
	// scale holds an FP8 weight's per-row scales (F32 [rows]; Len 0 for other types).
	scale cuda.Buffer
	// sparse is a 2:4 weight's compressed form (sparse.go); buf then has its type and
	// length but no memory, and only matMul reads the weight.
	sparse *cuda.SparseWeight
}

// DType returns the element type as a quant.Type.
func (t *tensor) DType() quant.Type {
	held := cuda.Unpacked(t.buf.DType) // a repacked matrix reports its GGML type
	switch held {
	case cuda.F16:
		return quant.F16
	case cuda.BF16:
		return quant.BF16
	case cuda.I32:
		return quant.I32
	case cuda.FP8:
		return quant.FP8
	}
	for qt, dt := range blockTypes {
		if dt == held {
			return qt
		}
	}
	return quant.F32
}

// Shape returns the dimensions, outermost first.
func (t *tensor) Shape() []int { return t.shape }

// Rows returns the view of the first n rows, at the same device address.
func (t *tensor) Rows(n int) backend.Tensor {
	if t.sparse != nil {
		// A compressed weight has no row views: the next op's shape check reports it.
		return t
	}
	per := t.cols()
	if len(t.shape) < 2 {
		per = 1
	}
	b, err := t.buf.Slice(0, n*per)
	if err != nil {
		// An out-of-range n is a caller bug; keep the whole tensor so the next op's shape
		// check reports it rather than panicking here.
		return t
	}
	v := &tensor{buf: b, shape: append([]int{n}, t.shape[1:]...), view: true}
	if t.scale.Len > 0 {
		if v.scale, err = t.scale.Slice(0, n); err != nil {
			return t
		}
	}
	return v
}

// rows returns the outermost dimension (1 for a vector).
func (t *tensor) rows() int {
	if len(t.shape) < 2 {
		return 1
	}
	return t.shape[0]
}

// cols returns the innermost dimension.
func (t *tensor) cols() int { return t.shape[len(t.shape)-1] }

// devTensor returns t as a tensor of this backend holding one of dtypes, in memory of its
// own (not a 2:4 weight compressed for cuSPARSELt).
func devTensor(op, what string, t backend.Tensor, dtypes ...cuda.DType) (*tensor, error) {
	c, err := anyTensor(op, what, t, dtypes...)
	if err == nil && c.sparse != nil {
		return nil, fmt.Errorf("cuda %s: %s is a 2:4 weight compressed for cuSPARSELt, which this op does not read (load with --sparse-2of4=off)", op, what)
	}
	return c, err
}

// devWeight returns t as a weight matrix of this backend for matMul, which also takes a
// compressed 2:4 weight.
func devWeight(op, what string, t backend.Tensor) (*tensor, error) {
	return anyTensor(op, what, t, weightTypes...)
}

// anyTensor is devTensor accepting a compressed 2:4 weight too.
func anyTensor(op, what string, t backend.Tensor, dtypes ...cuda.DType) (*tensor, error) {
	c, ok := t.(*tensor)
	if !ok || c == nil || (c.buf.Ptr == 0 && c.sparse == nil) {
		return nil, fmt.Errorf("cuda %s: %s is not a CUDA tensor", op, what)
	}
	for _, d := range dtypes {
		if c.buf.DType == d {
			return c, nil
		}
	}
	return nil, fmt.Errorf("cuda %s: %s is %s, want one of %v", op, what, c.buf.DType, dtypes)
}

// sameShape checks that a and b have the same rows and columns.
func sameShape(op string, a, b *tensor) error {
	if a.rows() != b.rows() || a.cols() != b.cols() {
		return fmt.Errorf("cuda %s: shapes %v and %v differ", op, a.shape, b.shape)
	}
	return nil
}

// kvCache is the Backend's paged KV cache: one cuda.KVCacheLayer per layer, each layer's K and V
// a separate allocation.
type kvCache struct {
	spec   backend.KVSpec
	layers []*cuda.KVCacheLayer
}

// Spec returns the cache's geometry and element type, as it was asked for.
func (c *kvCache) Spec() backend.KVSpec { return c.spec }

// kvOf returns kv as this backend's cache and its layer l (l < 0: none).
func kvOf(op string, kv backend.KVCache, l int) (*kvCache, *cuda.KVCacheLayer, error) {
	c, ok := kv.(*kvCache)
	if !ok || c == nil {
		return nil, nil, fmt.Errorf("cuda %s: the KV cache is not a CUDA cache", op)
	}
	if l < 0 {
		return c, nil, nil
	}
	if l >= len(c.layers) {
		return nil, nil, fmt.Errorf("cuda %s: layer %d outside the cache's %d", op, l, len(c.layers))
	}
	return c, c.layers[l], nil
}

// step is an uploaded StepMeta: the host copy and views of its index arrays in one device
// buffer.
type step struct {
	meta                                    *backend.StepMeta
	tokens, positions, slots, queryStarts   cuda.Buffer
	contextLens, blockTables, logitsIndices cuda.Buffer
	tokenTypes                              cuda.Buffer // StepMeta.TokenTypes; Len 0 when absent
	loraSlots, loraRanks                    cuda.Buffer // StepMeta.LoRASlots and LoRARanks; Len 0 when absent
	loraOrder, loraTiles                    cuda.Buffer // the slots' tokens grouped for the LoRA kernel (cuda.LoRAPlan); Len 0 when absent
	// maxBlocks is the block tables' row stride on the device: meta.MaxBlocks, or a bound
	// of it for a graph step.
	maxBlocks int
	// graphable marks a step of a graph shape (GraphShape), laid out for graph replay;
	// query is its tokens per sequence.
	graphable bool
	query     int
}

// Meta returns the host copy.
func (s *step) Meta() *backend.StepMeta { return s.meta }

// stepOf returns st as this backend's current step.
func (b *Backend) stepOf(op string, st backend.Step) (*step, error) {
	s, ok := st.(*step)
	if !ok || s == nil || s != b.cur || s.meta == nil {
		return nil, fmt.Errorf("cuda %s: the step is not the backend's current step", op)
	}
	return s, nil
}
