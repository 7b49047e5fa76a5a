package cudabackend_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// archRecord is what TestArchRecords writes for scripts/torch_ref.py: one backend's
// logits after the prompt, its greedy tokens, and the logits each token was picked from
// (Steps[0] is Logits).
type archRecord struct {
	Model   string      `json:"model"`
	Backend string      `json:"backend"`
	Prompt  []int32     `json:"prompt"`
	Logits  []float32   `json:"logits"`
	Tokens  []int32     `json:"tokens"`
	Steps   [][]float32 `json:"steps"`
}

// TestArchRecords runs every Hugging Face folder under KVASIR_ARCH_MODELS (the small
// synthesized models of the architectures that scripts/torch_arch.sh checks against
// transformers) on the CPU and the GPU: a 24-token prompt (longer than the shapes'
// sliding windows), then 32 greedy tokens. It checks the GPU against the CPU and writes
// both runs to KVASIR_GPU_OUT as kvasir_NAME_cpu.json and kvasir_NAME_cuda.json.
func TestArchRecords(t *testing.T) {
	const genTokens, promptLen = 32, 24
	dir, out := os.Getenv("KVASIR_ARCH_MODELS"), os.Getenv("KVASIR_GPU_OUT")
	if dir == "" || out == "" {
		t.Skip("KVASIR_ARCH_MODELS and KVASIR_GPU_OUT are not both set (scripts/torch_arch.sh sets them)")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		ran++
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			fm, err := format.Open(path, format.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer fm.Close()
			be := newBackend(t)
			gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{be}})
			if err != nil {
				t.Fatal(err)
			}
			defer gpu.Close()
			cb := cpubackend.New(0)
			defer cb.Close()
			cpu, err := model.New(fm, model.Options{Backends: []backend.Backend{cb}})
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			r := rand.New(rand.NewPCG(3, 4))
			prompt := make([]int32, promptLen)
			for i := range prompt {
				prompt[i] = int32(3 + r.IntN(fm.Config.VocabSize-3))
			}
			gs, gt := greedyRun(t, gpu, prompt, genTokens)
			cs, ct := greedyRun(t, cpu, prompt, genTokens)
			e := relErr(gs[0], cs[0])
			same := 0
			for same < genTokens && gt[same] == ct[same] {
				same++
			}
			fmt.Printf("RESULT|arch|%s: logits rel. error cuda vs cpu|%.2e|greedy %d/%d equal\n", name, e, same, genTokens)
			if e > 1e-4 {
				t.Errorf("logits rel. error cuda vs cpu %.3e > 1e-4", e)
			}
			if same < genTokens {
				t.Errorf("greedy tokens part at %d: cuda %v, cpu %v", same, gt, ct)
			}
			for _, rec := range []archRecord{
				{Model: path, Backend: "cpu", Prompt: prompt, Logits: cs[0], Tokens: ct, Steps: cs},
				{Model: path, Backend: "cuda", Prompt: prompt, Logits: gs[0], Tokens: gt, Steps: gs},
			} {
				b, err := json.Marshal(rec)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("kvasir_%s_%s.json", name, rec.Backend)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if ran == 0 {
		t.Fatalf("no model folders under %s", dir)
	}
}
