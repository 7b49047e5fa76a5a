// Package cpubackend implements the backend op set (package backend) on the CPU: each op
// checks its operands and calls the cpu package's kernels on a worker pool, eagerly.
// Weight matrices are used in place (usually the model file's mapped bytes) or, after
// SetCopyWeights, copied at upload into memory backed by huge pages (cpu.WeightArena).
package cpubackend

import (
	"fmt"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Backend is the CPU backend. Run serializes its callers, so it runs one step at a time,
// as a device does.
type Backend struct {
	pool *cpu.Pool
	mu   sync.Mutex // held by Run
	step step       // the current step; its buffers are reused from step to step

	attnSeqs  []cpu.AttentionSeq // Attention's per-sequence arguments, reused across calls
	upScratch []float32          // MatMulSwiGLU's up product for weights without kernels
	mmOuts    [][]float32        // MatMuls' arguments, reused across calls
	mmWeights []cpu.Weight
	logits    []float32 // LogitsArgmax's logits, reused across calls

	arena       cpu.WeightArena // the copies of the matrices uploaded
	copyWeights bool            // UploadWeight copies matrices into arena
}

// New starts a CPU backend on a pool of threads workers (< 1: all cores), with the fastest
// kernel set this CPU supports.
func New(threads int) *Backend {
	return &Backend{pool: cpu.NewPool(threads)}
}

// NewKernels is New with the kernel set named kernelSet, as cpu.KernelSets lists them ("":
// the fastest, "generic": the pure-Go kernels).
func NewKernels(threads int, kernelSet string) (*Backend, error) {
	p, err := cpu.NewPoolKernels(threads, kernelSet)
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	return &Backend{pool: p}, nil
}

// Pool returns the worker pool the kernels run on.
func (b *Backend) Pool() *cpu.Pool { return b.pool }

// Name describes the backend.
func (b *Backend) Name() string {
	return fmt.Sprintf("cpu (%d threads, %s kernels)", b.pool.Threads(), b.pool.KernelSet())
}

// Run calls fn, one caller at a time.
func (b *Backend) Run(fn func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fn()
}

// Close stops the worker pool.
func (b *Backend) Close() error {
	b.pool.Close()
	return nil
}

// SetCopyWeights makes UploadWeight copy matrices into memory backed by huge pages (a
// cpu.WeightArena) instead of using their bytes where it finds them (usually the model
// file's mapping, which the kernel maps in 4 KiB pages): decode steps stream the weights
// faster, for one more copy of them in resident memory and a slower load. Call it before
// uploading.
func (b *Backend) SetCopyWeights(copy bool) { b.copyWeights = copy }

// UploadWeight wraps a matrix's bytes in place, or copies them into the backend's huge-page
// arena (see SetCopyWeights), and decodes a 1-D tensor to float32.
func (b *Backend) UploadWeight(t *format.Tensor) (backend.Tensor, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("cpu upload: %w", err)
	}
	if !quant.Supported(t.Type) {
		return nil, fmt.Errorf("cpu upload: tensor %q: type %s is not supported", t.Name, t.Type)
	}
	if len(t.Shape) == 1 {
		v := make([]float32, t.Shape[0])
		if err := quant.Dequantize(t.Type, t.Data, v); err != nil {
			return nil, fmt.Errorf("cpu upload: tensor %q: %w", t.Name, err)
		}
		return &tensor{shape: []int{len(v)}, f32: v}, nil
	}
	rows, cols := t.Rows()
	data := t.Data
	if b.copyWeights {
		data, _ = b.arena.Copy(b.pool, data)
	}
	return &tensor{shape: []int{rows, cols}, w: cpu.Weight{Type: t.Type, Rows: rows, Cols: cols, Data: data}}, nil
}

// NewTensor allocates a zeroed F32 or I32 tensor of one or two dimensions.
func (b *Backend) NewTensor(dtype quant.Type, shape ...int) (backend.Tensor, error) {
	if len(shape) < 1 || len(shape) > 2 {
		return nil, fmt.Errorf("cpu: new tensor of shape %v: want 1 or 2 dimensions", shape)
	}
	n := 1
	for _, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("cpu: new tensor of shape %v", shape)
		}
		n *= d
	}
	t := &tensor{shape: append([]int(nil), shape...)}
	switch dtype {
	case quant.F32:
		t.f32 = make([]float32, n)
	case quant.I32:
		t.i32 = make([]int32, n)
	default:
		return nil, fmt.Errorf("cpu: new tensor of %s: want f32 or i32", dtype)
	}
	return t, nil
}

// Free lets the garbage collector have t.
func (b *Backend) Free(t backend.Tensor) error { return nil }

// NewKVCache allocates a zeroed cache of F32 or F16 elements (spec.DType), each vector
// held once when spec.ValuesAreKeys.
func (b *Backend) NewKVCache(spec backend.KVSpec) (backend.KVCache, error) {
	if spec.Layers <= 0 {
		return nil, fmt.Errorf("cpu kv cache: %d layers", spec.Layers)
	}
	c := &kvCache{spec: spec, layers: make([]*cpu.KVCacheLayer, spec.Layers)}
	for l := range c.layers {
		newLayer := cpu.NewKVCacheLayer
		if spec.ValuesAreKeys {
			newLayer = cpu.NewKeysOnlyKVCacheLayer
		}
		layer, err := newLayer(spec.NumBlocks, spec.BlockSize, spec.KVHeads, spec.HeadDim, spec.DType)
		if err != nil {
			return nil, fmt.Errorf("cpu kv cache: layer %d: %w", l, err)
		}
		c.layers[l] = layer
	}
	return c, nil
}

// UploadStep keeps meta (no copy: it must not change until the step is done) and
// forgets the previous step's rotation tables and context indices.
func (b *Backend) UploadStep(meta *backend.StepMeta) (backend.Step, error) {
	n, seqs := meta.NumTokens(), meta.NumSeqs()
	switch {
	case n == 0 || seqs <= 0:
		return nil, fmt.Errorf("cpu step: %d tokens in %d sequences", n, seqs)
	case len(meta.Positions) != n || len(meta.SlotMapping) != n:
		return nil, fmt.Errorf("cpu step: %d tokens, %d positions, %d slots", n, len(meta.Positions), len(meta.SlotMapping))
	case len(meta.ContextLens) != seqs || len(meta.BlockTables) != seqs*meta.MaxBlocks:
		return nil, fmt.Errorf("cpu step: %d sequences, %d context lengths, %d block table entries of %d per sequence",
			seqs, len(meta.ContextLens), len(meta.BlockTables), meta.MaxBlocks)
	case meta.QueryStarts[0] != 0 || int(meta.QueryStarts[seqs]) != n:
		return nil, fmt.Errorf("cpu step: sequences cover tokens [%d, %d) of %d", meta.QueryStarts[0], meta.QueryStarts[seqs], n)
	}
	for i := range seqs {
		q := meta.QueryStarts[i+1] - meta.QueryStarts[i]
		if q <= 0 {
			return nil, fmt.Errorf("cpu step: sequence %d has no tokens", i)
		}
		if meta.ContextLens[i] < q {
			return nil, fmt.Errorf("cpu step: sequence %d: %d tokens in a context of %d", i, q, meta.ContextLens[i])
		}
	}
	if meta.LoRASlots != nil && len(meta.LoRASlots) != n {
		return nil, fmt.Errorf("cpu step: %d adapter slots for %d tokens", len(meta.LoRASlots), n)
	}
	s := &b.step
	s.meta = meta
	s.rope = backend.Rope{}
	s.ctx = nil
	return s, nil
}

// CopyBlocks copies whole blocks, keys and values, in every layer.
func (b *Backend) CopyBlocks(kv backend.KVCache, copies []backend.BlockCopy) error {
	c, _, err := cache("copy blocks", kv, -1)
	if err != nil {
		return err
	}
	for _, op := range copies {
		if op.Src < 0 || op.Dst < 0 || int(op.Src) >= c.spec.NumBlocks || int(op.Dst) >= c.spec.NumBlocks {
			return fmt.Errorf("cpu copy blocks: block %d to %d: outside the cache's %d blocks", op.Src, op.Dst, c.spec.NumBlocks)
		}
		for _, l := range c.layers {
			if err := l.CopyBlock(int(op.Dst), int(op.Src)); err != nil {
				return fmt.Errorf("cpu copy blocks: %w", err)
			}
		}
	}
	return nil
}
