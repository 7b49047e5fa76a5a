package cudabackend_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/prune"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestBackendSparse2of4MatchesDense: a small Llama (2 layers, dim 512) pruned to 2:4 by
// `kvasir prune --pattern 2:4`'s code runs on the GPU with its 14 block matrices
// compressed for cuSPARSELt (--sparse-2of4=on) and densely (off): prefill logits of a
// 45-token prompt and of decode steps within the 16-bit products' tolerance of each
// other and of the CPU reference (twice the dense run's error plus 1e-2: the sparse
// products are rounded to BF16), and the greedy tokens the same up to a near-tie.
func TestBackendSparse2of4MatchesDense(t *testing.T) {
	if _, n, err := cuda.Devices(); n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	c := &shape.Config
	c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.Layers, c.VocabSize = 512, 8, 2, 64, 64, 1536, 2, 512
	src, err := synth.Model(shape, quant.BF16, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "pruned-2of4.gguf")
	if err := prune.Prune(src, path, prune.Options{Method: "magnitude", Pattern: prune.Pattern{N: 2, M: 4}}); err != nil {
		t.Fatal(err)
	}
	fm, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()

	prompt := make([]int32, 45)
	for i := range prompt {
		prompt[i] = int32(3 + (i*37)%500)
	}
	ref, err := model.NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, tok := range prompt {
		if want, err = ref.Forward(int(tok)); err != nil {
			t.Fatal(err)
		}
	}
	const steps = 12
	run := func(mode cudabackend.SparseMode) ([][]float32, []int32, string) {
		var log strings.Builder
		be, err := cudabackend.NewBackend(cudabackend.BackendOptions{Sparse2of4: mode, Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := be.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}()
		m, err := model.New(fm, model.Options{Backends: []backend.Backend{be}})
		if err != nil {
			t.Fatalf("sparse %s: %v", mode, err)
		}
		defer m.Close()
		logits, toks := greedyRun(t, m, prompt, steps)
		captured, failed, ferr := be.GraphStats()
		t.Logf("sparse %s: %s; %s graphs captured %d, failed %d (%v)", mode, strings.TrimSpace(log.String()), be.SparseSummary(), captured, failed, ferr)
		return logits, toks, be.SparseSummary()
	}
	onLogits, onToks, summary := run(cudabackend.SparseOn)
	offLogits, offToks, offSummary := run(cudabackend.SparseOff)
	if !strings.Contains(summary, "14 weights compressed") {
		t.Errorf("on: summary %q, want 14 weights compressed", summary)
	}
	if offSummary != "" {
		t.Errorf("off: summary %q, want none", offSummary)
	}
	errOn, errOff := relErr(onLogits[0], want), relErr(offLogits[0], want)
	fmt.Printf("RESULT|model|2:4 pruned llama (dim 512, 2 layers) prefill logits' relative error to the CPU reference, cuSPARSELt on|%.2e|off %.2e\n", errOn, errOff)
	if errOn > 2*errOff+1e-2 {
		t.Errorf("prefill logits: relative error %.3e with 2:4 products, %.3e dense", errOn, errOff)
	}
	for i := range min(len(onLogits), len(offLogits)) {
		if e := relErr(onLogits[i], offLogits[i]); e > 2e-2 {
			t.Errorf("step %d: logits with 2:4 products %.3e from the dense run's", i, e)
		}
		if onToks[i] != offToks[i] {
			break // the steps after a different token see different inputs
		}
	}
	// The greedy tokens agree until the dense run's choice is a near-tie: where they first
	// differ, the dense logits may prefer their token by no more than 2% of the logits'
	// RMS (the products' BF16 rounding moves logits by well under that).
	same := 0
	for same < steps && onToks[same] == offToks[same] {
		same++
	}
	fmt.Printf("RESULT|model|2:4 pruned llama greedy tokens equal with cuSPARSELt on and off|%d of %d|%v vs %v\n", same, steps, onToks, offToks)
	if same < steps {
		l := offLogits[same]
		var ms float64
		for _, v := range l {
			ms += float64(v) * float64(v)
		}
		rms := math.Sqrt(ms / float64(len(l)))
		if gap := float64(l[offToks[same]] - l[onToks[same]]); gap > 0.02*rms {
			t.Errorf("step %d: token %d with 2:4 products, %d dense: the dense logits prefer theirs by %.4f (RMS %.4f)", same, onToks[same], offToks[same], gap, rms)
		}
	}
}
