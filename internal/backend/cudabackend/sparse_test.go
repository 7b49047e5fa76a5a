package cudabackend

import (
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/prune"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

func TestParseSparseMode(t *testing.T) {
	for s, want := range map[string]SparseMode{"": SparseOff, "auto": SparseAuto, "on": SparseOn, "off": SparseOff} {
		got, err := ParseSparseMode(s)
		if err != nil || got != want {
			t.Errorf("ParseSparseMode(%q) = %v, %v; want %v", s, got, err, want)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	for _, s := range []string{"yes", "ON", "2:4", "true"} {
		if _, err := ParseSparseMode(s); err == nil || !strings.Contains(err.Error(), "auto, on or off") {
			t.Errorf("ParseSparseMode(%q): error %v, want one listing auto, on or off", s, err)
		}
	}
}

// TestNewBackendRefusesSparseMode: a mode out of range is refused before any device is
// opened.
func TestNewBackendRefusesSparseMode(t *testing.T) {
	for _, m := range []SparseMode{-1, SparseOff + 1} {
		if _, err := NewBackend(BackendOptions{Sparse2of4: m}); err == nil || !strings.Contains(err.Error(), "2:4 sparse mode") {
			t.Errorf("mode %d: error %v", int(m), err)
		}
	}
}

func TestSparseLinearNames(t *testing.T) {
	for name, want := range map[string]bool{
		"blk.0.attn_q.weight": true, "blk.12.ffn_down.weight": true, "blk.3.attn_output.weight": true,
		"blk.1.ffn_gate.weight": true, "blk.1.ffn_up.weight": true, "blk.1.attn_k.weight": true, "blk.1.attn_v.weight": true,
		"token_embd.weight": false, "output.weight": false, "blk.0.ffn_gate_exps.weight": false,
		"blk.0.attn_norm.weight": false, "blk.0.attn_q.bias": false, "model.layers.0.self_attn.q_proj.weight": false,
	} {
		if got := sparseLinear.MatchString(name); got != want {
			t.Errorf("sparseLinear(%q) = %v, want %v", name, got, want)
		}
	}
}

// bf16Tensor returns a BF16 tensor of rows x cols of vals, repeated.
func bf16Tensor(name string, rows, cols int, vals ...float32) *format.Tensor {
	data := make([]byte, 2*rows*cols)
	for i := range rows * cols {
		binary.LittleEndian.PutUint16(data[2*i:], quant.F32ToBF16(vals[i%len(vals)]))
	}
	return &format.Tensor{Name: name, Type: quant.BF16, Shape: []int{rows, cols}, Data: data}
}

// TestUploadSparseDecides: which weights uploadSparse leaves to the dense path, decided
// on the host before the device is touched: any weight with the mode off, a tensor that
// is not a linear layer's or not 2:4; and, where libcusparseLt is missing (this test runs
// those cases only there), a 2:4 weight in auto mode (counted in the summary's reasons)
// while on mode is an error naming the tensor.
func TestUploadSparseDecides(t *testing.T) {
	sparse := bf16Tensor("blk.0.attn_q.weight", 64, 64, 1, 0, 0, -2)
	dense := bf16Tensor("blk.0.attn_q.weight", 64, 64, 1, 2, 0, -2)
	embed := bf16Tensor("token_embd.weight", 64, 64, 1, 0, 0, -2)
	for _, c := range []struct {
		mode SparseMode
		t    *format.Tensor
	}{{SparseOff, sparse}, {SparseAuto, dense}, {SparseOn, dense}, {SparseOn, embed}, {SparseAuto, embed}} {
		b := &Backend{sparse: sparseState{mode: c.mode}}
		got, err := b.uploadSparse(c.t, cuda.BF16, 64, 64)
		if got != nil || err != nil {
			t.Errorf("mode %s, %s: %v, %v; want the dense path", c.mode, c.t.Name, got, err)
		}
		if b.sparse.tried {
			t.Errorf("mode %s, %s: cuSPARSELt was opened", c.mode, c.t.Name)
		}
		if want := map[bool]int{true: 1}[c.mode != SparseOff && c.t == dense]; b.sparse.notSparse != want {
			t.Errorf("mode %s, %s: %d weights counted not 2:4, want %d", c.mode, c.t.Name, b.sparse.notSparse, want)
		}
	}
	if lib, err := cuda.OpenCuSPARSELt(); err == nil {
		t.Skipf("%s is installed: the missing-library cases are not run", lib.Describe())
	}
	var log strings.Builder
	auto := &Backend{sparse: sparseState{mode: SparseAuto, log: &log}}
	for range 2 {
		if got, err := auto.uploadSparse(sparse, cuda.BF16, 64, 64); got != nil || err != nil {
			t.Fatalf("auto without the library: %v, %v; want the dense path", got, err)
		}
	}
	if n := strings.Count(log.String(), "runs densely"); n != 1 || !strings.Contains(log.String(), "cuSPARSELt unavailable") {
		t.Errorf("auto without the library logged %q, want one line saying why", log.String())
	}
	if s := auto.sparse.skipped; len(s) != 1 {
		t.Errorf("skipped %v, want one reason counted twice", s)
	}
	on := &Backend{sparse: sparseState{mode: SparseOn}}
	if _, err := on.uploadSparse(sparse, cuda.BF16, 64, 64); err == nil || !strings.Contains(err.Error(), "blk.0.attn_q.weight") ||
		!strings.Contains(err.Error(), "cuSPARSELt unavailable") {
		t.Errorf("on without the library: error %v, want one naming the tensor and the library", err)
	}
}

// TestPrunedFileIs2of4: every linear-layer weight of a file `kvasir prune --pattern 2:4`
// writes (its code, on a small synthesized Llama) passes the upload's 2:4 check and fits
// cuSPARSELt's shapes; the unpruned model's do not pass it, nor does the pruned file's
// embedding.
func TestPrunedFileIs2of4(t *testing.T) {
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	c := &shape.Config
	c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.Layers, c.VocabSize = 128, 2, 1, 64, 64, 256, 2, 320
	src, err := synth.Model(shape, quant.BF16, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "p.gguf")
	if err := prune.Prune(src, path, prune.Options{Method: "magnitude", Pattern: prune.Pattern{N: 2, M: 4}}); err != nil {
		t.Fatal(err)
	}
	fm, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	linear := 0
	for _, m := range []*format.Model{src, fm} {
		for _, ft := range m.Tensors {
			if len(ft.Shape) != 2 || ft.Type != quant.BF16 {
				continue
			}
			rows, cols := ft.Rows()
			ok, _ := cuda.Is2of4(ft.Data, cols)
			want := m == fm && sparseLinear.MatchString(ft.Name)
			if ok != want {
				t.Errorf("%s (%s): Is2of4 = %v, want %v", ft.Name, map[bool]string{true: "pruned", false: "source"}[m == fm], ok, want)
			}
			if want {
				linear++
				if why := cuda.SparseShapeOK(cuda.BF16, rows, cols); why != "" {
					t.Errorf("%s: %s", ft.Name, why)
				}
			}
		}
	}
	if linear != 14 {
		t.Errorf("%d pruned linear weights, want 14", linear)
	}
}
