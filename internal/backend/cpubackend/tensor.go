package cpubackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// tensor is a CPU tensor: float32 or int32 values in Go memory, or a weight matrix in its
// block format (usually the model file's mapped bytes).
type tensor struct {
	shape []int
	f32   []float32  // F32 tensors
	i32   []int32    // I32 tensors
	w     cpu.Weight // matrices of any other type (and F32 matrices from a file)
}

// DType returns the element type.
func (t *tensor) DType() quant.Type {
	switch {
	case t.f32 != nil:
		return quant.F32
	case t.i32 != nil:
		return quant.I32
	}
	return t.w.Type
}

// Shape returns the dimensions, outermost first.
func (t *tensor) Shape() []int { return t.shape }

// Rows returns the view of the first n rows.
func (t *tensor) Rows(n int) backend.Tensor {
	shape := append([]int{n}, t.shape[1:]...)
	per := 1
	for _, d := range t.shape[1:] {
		per *= d
	}
	v := &tensor{shape: shape}
	switch {
	case t.f32 != nil:
		v.f32 = t.f32[:n*per]
	case t.i32 != nil:
		v.i32 = t.i32[:n*per]
	default:
		rb, _ := t.w.Type.RowBytes(t.w.Cols)
		v.w = cpu.Weight{Type: t.w.Type, Rows: n, Cols: t.w.Cols, Data: t.w.Data[:n*rb]}
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

// activation returns t as a CPU tensor of float32 values, or an error naming op and what.
func activation(op, what string, t backend.Tensor) (*tensor, error) {
	c, ok := t.(*tensor)
	if !ok || c == nil {
		return nil, fmt.Errorf("cpu %s: %s is not a CPU tensor", op, what)
	}
	if c.f32 == nil {
		return nil, fmt.Errorf("cpu %s: %s is %s, want f32 values", op, what, c.DType())
	}
	return c, nil
}

// indices returns t as a CPU tensor of int32 values.
func indices(op, what string, t backend.Tensor) (*tensor, error) {
	c, ok := t.(*tensor)
	if !ok || c == nil || c.i32 == nil {
		return nil, fmt.Errorf("cpu %s: %s is not a CPU tensor of i32 values", op, what)
	}
	return c, nil
}

// matrix returns t as a weight matrix in its block format.
func matrix(op, what string, t backend.Tensor) (cpu.Weight, error) {
	c, ok := t.(*tensor)
	if !ok || c == nil || c.f32 != nil || c.i32 != nil {
		return cpu.Weight{}, fmt.Errorf("cpu %s: %s is not a weight matrix uploaded to the CPU backend", op, what)
	}
	return c.w, nil
}

// sameShape checks that a and b have the same rows and columns.
func sameShape(op string, a, b *tensor) error {
	if a.rows() != b.rows() || a.cols() != b.cols() {
		return fmt.Errorf("cpu %s: shapes %v and %v differ", op, a.shape, b.shape)
	}
	return nil
}

// kvCache is a CPU KV cache: one cpu.KVCacheLayer per layer.
type kvCache struct {
	spec   backend.KVSpec
	layers []*cpu.KVCacheLayer
}

// Spec returns the cache's geometry.
func (c *kvCache) Spec() backend.KVSpec { return c.spec }

// cache returns kv as a CPU cache and its layer l (when l >= 0).
func cache(op string, kv backend.KVCache, l int) (*kvCache, *cpu.KVCacheLayer, error) {
	c, ok := kv.(*kvCache)
	if !ok || c == nil {
		return nil, nil, fmt.Errorf("cpu %s: the KV cache is not a CPU cache", op)
	}
	if l < 0 {
		return c, nil, nil
	}
	if l >= len(c.layers) {
		return nil, nil, fmt.Errorf("cpu %s: layer %d outside the cache's %d", op, l, len(c.layers))
	}
	return c, c.layers[l], nil
}

// step is an uploaded StepMeta (the CPU keeps the host copy) with the rotation tables of
// its positions, computed by the step's first RopeKVWrite, and its tokens' context
// indices, computed by its first Attention: every layer shares them.
type step struct {
	meta *backend.StepMeta
	// rope is what cos and sin were computed for (the zero Rope: nothing yet).
	rope     backend.Rope
	cos, sin []float32
	// rows maps token t to row t of the tables (cpu.Rope indexes its tables by these).
	rows []int32
	// ctx is each token's index in its sequence's context (nil: not computed yet); ctxBuf
	// its storage, reused from step to step.
	ctx, ctxBuf []int32
}

// Meta returns the host copy of the step's metadata.
func (s *step) Meta() *backend.StepMeta { return s.meta }

// stepOf returns st as a CPU step.
func stepOf(op string, st backend.Step) (*step, error) {
	s, ok := st.(*step)
	if !ok || s == nil || s.meta == nil {
		return nil, fmt.Errorf("cpu %s: the step was not uploaded to the CPU backend", op)
	}
	return s, nil
}
