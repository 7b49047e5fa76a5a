package cpubackend

import (
	"encoding/binary"
	"math"
	"os"
	"slices"
	"sort"
	"testing"
	"unsafe"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// newBackend starts a two-thread backend on the kernel set the environment variable
// KVASIR_CPU names (the test script runs the package again with KVASIR_CPU=generic), the
// fastest when it is unset.
func newBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := NewKernels(2, os.Getenv("KVASIR_CPU"))
	if err != nil {
		t.Fatalf("KVASIR_CPU: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// f32Tensor returns a 2-D F32 tensor holding vals.
func f32Tensor(t *testing.T, b *Backend, rows, cols int, vals ...float32) *tensor {
	t.Helper()
	x, err := b.NewTensor(quant.F32, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	copy(x.(*tensor).f32, vals)
	return x.(*tensor)
}

// f32File returns a file tensor of float32 values.
func f32File(name string, shape []int, vals []float32) *format.Tensor {
	var data []byte
	for _, v := range vals {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	return &format.Tensor{Name: name, Type: quant.F32, Shape: shape, Data: data}
}

// TestUploadWeight: matrices are used in place, vectors decoded; bad tensors are errors.
func TestUploadWeight(t *testing.T) {
	b := newBackend(t)
	m := f32File("m", []int{2, 32}, make([]float32, 64))
	w, err := b.UploadWeight(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.(*tensor).w.Data; unsafe.SliceData(got) != unsafe.SliceData(m.Data) {
		t.Errorf("the matrix was copied")
	}
	if w.DType() != quant.F32 || !slices.Equal(w.Shape(), []int{2, 32}) {
		t.Errorf("matrix is %s %v", w.DType(), w.Shape())
	}
	v, err := b.UploadWeight(f32File("v", []int{3}, []float32{1, 2, 3}))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(*tensor).f32; !slices.Equal(got, []float32{1, 2, 3}) {
		t.Errorf("vector decoded to %v", got)
	}
	short := f32File("short", []int{2, 32}, make([]float32, 63))
	if _, err := b.UploadWeight(short); err == nil {
		t.Errorf("a tensor with too few bytes was accepted")
	}
}

// TestUploadWeightCopied: after SetCopyWeights a matrix is a copy of the file's bytes
// (equal, not the same memory), a vector decoded as before.
func TestUploadWeightCopied(t *testing.T) {
	b := newBackend(t)
	b.SetCopyWeights(true)
	vals := make([]float32, 64)
	for i := range vals {
		vals[i] = float32(i) - 31.5
	}
	m := f32File("m", []int{2, 32}, vals)
	w, err := b.UploadWeight(m)
	if err != nil {
		t.Fatal(err)
	}
	got := w.(*tensor).w.Data
	if unsafe.SliceData(got) == unsafe.SliceData(m.Data) {
		t.Errorf("the matrix was not copied")
	}
	if !slices.Equal(got, m.Data) {
		t.Errorf("the copy differs from the file's bytes")
	}
	v, err := b.UploadWeight(f32File("v", []int{3}, []float32{1, 2, 3}))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(*tensor).f32; !slices.Equal(got, []float32{1, 2, 3}) {
		t.Errorf("vector decoded to %v", got)
	}
}

// TestRowsView: a view shares its tensor's memory.
func TestRowsView(t *testing.T) {
	b := newBackend(t)
	x := f32Tensor(t, b, 3, 2, 1, 2, 3, 4, 5, 6)
	v := x.Rows(2).(*tensor)
	if !slices.Equal(v.shape, []int{2, 2}) || !slices.Equal(v.f32, []float32{1, 2, 3, 4}) {
		t.Fatalf("view %v %v", v.shape, v.f32)
	}
	v.f32[0] = 9
	if x.f32[0] != 9 {
		t.Errorf("the view does not share memory")
	}
}

// TestOpsRejectBadOperands: mismatched shapes and foreign tensors are errors, never
// panics.
func TestOpsRejectBadOperands(t *testing.T) {
	b := newBackend(t)
	x := f32Tensor(t, b, 2, 4)
	y := f32Tensor(t, b, 3, 4)
	wv, err := b.UploadWeight(f32File("wv", []int{4}, []float32{1, 1, 1, 1}))
	if err != nil {
		t.Fatal(err)
	}
	wm, err := b.UploadWeight(f32File("wm", []int{5, 32}, make([]float32, 160)))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.NewTensor(quant.I32, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.UploadStep(&backend.StepMeta{Tokens: []int32{1, 7}, Positions: []int32{0, 1}, SlotMapping: []int32{0, 1},
		QueryStarts: []int32{0, 2}, ContextLens: []int32{2}, BlockTables: []int32{0}, MaxBlocks: 1, LogitsIndices: []int32{3}})
	if err != nil {
		t.Fatal(err)
	}
	emb := f32Tensor(t, b, 2, 32)
	cases := map[string]func() error{
		"rmsnorm rows":        func() error { return b.RMSNorm(x, y, wv, 1e-5) },
		"rmsnorm weight":      func() error { return b.RMSNorm(x, x, f32Tensor(t, b, 1, 3), 1e-5) },
		"residual rows":       func() error { return b.RMSNormResidual(x, x, y, wv, 1e-5) },
		"head norm":           func() error { return b.HeadNorm(x, f32Tensor(t, b, 3, 1), 1e-5) },
		"matmul cols":         func() error { return b.MatMul(f32Tensor(t, b, 2, 5), x, wm) },
		"matmul activation w": func() error { return b.MatMul(x, x, x) },
		"add bias":            func() error { return b.AddBias(x, f32Tensor(t, b, 1, 3)) },
		"swiglu":              func() error { return b.SwiGLU(x, x, y) },
		"i32 as f32":          func() error { return b.SwiGLU(ids, ids, ids) },
		"logits dst":          func() error { return b.Logits(make([]float32, 9), x, wm) },
		"route k > experts":   func() error { return b.RouteExperts(ids, f32Tensor(t, b, 2, 5), x, false) },
		"route ids as gains":  func() error { return b.RouteExperts(x, x, x, false) },
		"embedding token":     func() error { return b.Embedding(emb, wm, st) },
		"embedding shape":     func() error { return b.Embedding(x, wm, st) },
		"gather row":          func() error { return b.GatherRows(f32Tensor(t, b, 1, 4), x, st) },
		"gated add":           func() error { return b.GatedAdd(x, y, x, wv) },
	}
	for name, op := range cases {
		if err := op(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestUploadStepRejects: malformed step metadata is an error.
func TestUploadStepRejects(t *testing.T) {
	b := newBackend(t)
	good := func() *backend.StepMeta {
		return &backend.StepMeta{Tokens: []int32{1, 2}, Positions: []int32{0, 1}, SlotMapping: []int32{0, 1},
			QueryStarts: []int32{0, 2}, ContextLens: []int32{2}, BlockTables: []int32{0}, MaxBlocks: 1,
			MaxQueryLen: 2, MaxContextLen: 2, LogitsIndices: []int32{1}}
	}
	if _, err := b.UploadStep(good()); err != nil {
		t.Fatalf("good step: %v", err)
	}
	cases := map[string]func(m *backend.StepMeta){
		"no tokens":         func(m *backend.StepMeta) { m.Tokens = nil },
		"no sequences":      func(m *backend.StepMeta) { m.QueryStarts = nil },
		"short positions":   func(m *backend.StepMeta) { m.Positions = m.Positions[:1] },
		"short slots":       func(m *backend.StepMeta) { m.SlotMapping = m.SlotMapping[:1] },
		"tokens uncovered":  func(m *backend.StepMeta) { m.QueryStarts[1] = 1 },
		"short block table": func(m *backend.StepMeta) { m.MaxBlocks = 2 },
		"empty sequence": func(m *backend.StepMeta) {
			m.QueryStarts, m.ContextLens, m.BlockTables = []int32{0, 0, 2}, []int32{1, 2}, []int32{0, 0}
		},
		"context shorter than the query": func(m *backend.StepMeta) { m.ContextLens[0] = 1 },
	}
	for name, mutate := range cases {
		m := good()
		mutate(m)
		if _, err := b.UploadStep(m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestCopyBlocks: a block's keys and values move in every layer; others stay.
func TestCopyBlocks(t *testing.T) {
	b := newBackend(t)
	spec := backend.KVSpec{Layers: 2, NumBlocks: 3, BlockSize: 2, KVHeads: 1, HeadDim: 4, DType: quant.F32}
	kv, err := b.NewKVCache(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := kv.(*kvCache)
	per := spec.BlockSize * spec.KVHeads * spec.HeadDim
	for l, layer := range c.layers {
		for i := range layer.K {
			layer.K[i], layer.V[i] = float32(100*l+i), float32(-100*l-i)
		}
	}
	if err := b.CopyBlocks(kv, []backend.BlockCopy{{Src: 2, Dst: 0}}); err != nil {
		t.Fatal(err)
	}
	for l, layer := range c.layers {
		for i := range per {
			if layer.K[i] != float32(100*l+2*per+i) || layer.V[i] != float32(-100*l-2*per-i) {
				t.Fatalf("layer %d: slot value %d not copied", l, i)
			}
			if layer.K[per+i] != float32(100*l+per+i) {
				t.Fatalf("layer %d: block 1 changed", l)
			}
		}
	}
	for _, bad := range []backend.BlockCopy{{Src: 3, Dst: 0}, {Src: 0, Dst: -1}} {
		if err := b.CopyBlocks(kv, []backend.BlockCopy{bad}); err == nil {
			t.Errorf("copy %v accepted", bad)
		}
	}
	if _, err := b.NewKVCache(backend.KVSpec{Layers: 1, NumBlocks: 1, BlockSize: 1, KVHeads: 1, HeadDim: 1, DType: quant.BF16}); err == nil {
		t.Errorf("a bf16 cache was accepted")
	}
	spec.DType = quant.F16
	if kv, err = b.NewKVCache(spec); err != nil {
		t.Fatalf("an f16 cache: %v", err)
	}
	if err := b.CopyBlocks(kv, []backend.BlockCopy{{Src: 2, Dst: 0}, {Src: 0, Dst: 1}}); err != nil {
		t.Errorf("f16 copy: %v", err)
	}
}

// TestRouteExperts compares the routing with a plain sort of float64 softmax
// probabilities, ties included.
func TestRouteExperts(t *testing.T) {
	b := newBackend(t)
	const experts, k = 6, 3
	rows := [][]float32{
		{0.5, 2, -1, 2, 0.1, 3},
		{1, 1, 1, 1, 1, 1}, // all tied: the lowest indices win
		{-3, 4, 4, -2, 0, 4},
	}
	var flat []float32
	for _, r := range rows {
		flat = append(flat, r...)
	}
	logits := f32Tensor(t, b, len(rows), experts, flat...)
	for _, normalize := range []bool{false, true} {
		ids, err := b.NewTensor(quant.I32, len(rows), k)
		if err != nil {
			t.Fatal(err)
		}
		gains := f32Tensor(t, b, len(rows), k)
		if err := b.RouteExperts(ids, gains, logits, normalize); err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			p := make([]float64, experts)
			var sum float64
			for e, v := range r {
				p[e] = math.Exp(float64(v))
				sum += p[e]
			}
			order := []int{0, 1, 2, 3, 4, 5}
			sort.SliceStable(order, func(a, c int) bool { return p[order[a]] > p[order[c]] })
			var chosen float64
			for _, e := range order[:k] {
				chosen += p[e] / sum
			}
			for j, e := range order[:k] {
				if got := ids.(*tensor).i32[i*k+j]; int(got) != e {
					t.Errorf("row %d choice %d: expert %d, want %d", i, j, got, e)
				}
				want := p[e] / sum
				if normalize {
					want /= chosen
				}
				if got := gains.f32[i*k+j]; math.Abs(float64(got)-want) > 1e-6 {
					t.Errorf("row %d choice %d (normalize %v): gain %g, want %g", i, j, normalize, got, want)
				}
			}
		}
	}
}
