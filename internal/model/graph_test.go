package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// textbookOps lists the ops of one forward step of a model of config c, in order: what a
// device backend captures once and replays.
func textbookOps(c format.Config) []string {
	ops := []string{"UploadStep", "Embedding"}
	if c.EmbedScale > 0 {
		ops = append(ops, "Scale")
	}
	// A half-block's output: Gemma's and OLMo 2's post-norm, Granite's multiplier.
	halfOut := func() {
		if c.PostNorms {
			ops = append(ops, "RMSNorm")
		}
		if c.ResidualScale > 0 {
			ops = append(ops, "Scale")
		}
	}
	for l := range c.Layers {
		switch {
		case c.NoPreNorms && l > 0:
			ops = append(ops, "Add")
		case c.NoPreNorms:
		case l == 0:
			ops = append(ops, "RMSNorm")
		default:
			ops = append(ops, "RMSNormResidual")
		}
		switch {
		case c.MLA() && c.QLoRARank > 0:
			// q's down-projection and norm, the absorbed query, the cache vector's two
			// halves, the latent's norm, their sum.
			ops = append(ops, "MatMul", "RMSNorm", "MatMul", "MatMul", "MatMul", "SumSquares", "RMSNormSplit", "Add")
		case c.MLA():
			ops = append(ops, "MatMul", "MatMul", "MatMul", "SumSquares", "RMSNormSplit", "Add")
		default:
			ops = append(ops, "MatMul", "MatMul", "MatMul")
		}
		if c.QKVBias {
			ops = append(ops, "AddBias", "AddBias", "AddBias")
		}
		switch {
		case c.QKNormFull:
			ops = append(ops, "RMSNorm", "RMSNorm")
		case c.QKNorm:
			ops = append(ops, "HeadNorm", "HeadNorm")
		}
		attention := "Attention"
		if c.LayerWindow(l) > 0 || c.AttnSoftcap > 0 {
			attention = "AttentionWith"
		}
		ops = append(ops, "RopeKVWrite", attention, "MatMul")
		halfOut()
		if c.NoPreNorms {
			ops = append(ops, "Add")
		} else {
			ops = append(ops, "RMSNormResidual")
		}
		mlp := []string{"MatMul", "MatMul", "SwiGLU", "MatMul"}
		if c.Activation == "gelu_tanh" {
			mlp[2] = "GeGLU"
		}
		if !c.MoELayer(l) {
			ops = append(ops, mlp...)
		} else {
			route := "RouteExperts"
			if c.ExpertSigmoid {
				route = "RouteExpertsBiased"
			}
			ops = append(ops, "MatMul", route, "ExpertMLP")
			if c.ExpertScale > 0 && c.ExpertScale != 1 {
				ops = append(ops, "Scale")
			}
			switch {
			case c.SharedExpertGated():
				ops = append(append(ops, mlp...), "GatedAdd")
			case c.SharedExpertFFN > 0:
				ops = append(append(ops, mlp...), "Add") // DeepSeek's, ungated
			}
		}
		halfOut()
	}
	ops = append(ops, "RMSNormResidual", "GatherRows")
	if c.LogitScale > 0 {
		ops = append(ops, "Scale")
	}
	return append(ops, "Logits")
}

// opName returns the op of a recorded call.
func opName(call string) string {
	name, _, _ := strings.Cut(call, "(")
	return name
}

// TestStepIsReplayable runs every test shape through a recording backend and checks that
// a forward step is what a device backend can capture as a graph and replay: one Run
// holding the model's ops in textbook order, buffers allocated only before the step
// begins, the final Logits the only read-back, and two steps of one size issuing the very
// same calls on the very same buffers (only the uploaded step metadata differs). The
// recorder is transparent: the logits equal the plain CPU backend's bit for bit.
func TestStepIsReplayable(t *testing.T) {
	for name, c := range testShapes(t) {
		t.Run(name, func(t *testing.T) {
			fm := writeTwin(t, c, quant.F32, synth.GGUF)
			rec := newRecorder()
			t.Cleanup(func() { rec.Close() })
			m, err := New(fm, Options{Backends: []backend.Backend{rec}})
			if err != nil {
				t.Fatal(err)
			}
			plain, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(plain.Close)
			kv, err := m.NewKVCache(8, 4)
			if err != nil {
				t.Fatal(err)
			}
			plainKV, err := plain.NewKVCache(8, 4)
			if err != nil {
				t.Fatal(err)
			}
			seqs := []seqRun{
				{prompt: testTokens(9), table: []int32{3, 0, 6}},
				{prompt: testTokens(8)[1:], table: []int32{1, 7}},
			}
			steps := []*Batch{
				batchFor(seqs, []int{0, 0}, []int{5, 4}, 4), // prefill
				batchFor(seqs, []int{5, 4}, []int{6, 5}, 4), // decode
				batchFor(seqs, []int{6, 5}, []int{7, 6}, 4), // decode again, same size
			}
			first := len(rec.runs)
			for i, b := range steps {
				got, err := m.Forward(b, kv)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				want, err := plain.Forward(b, plainKV)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("step %d: logits through the recorder differ from the CPU backend's", i)
				}
			}
			runs := rec.runs[first:]
			if len(runs) != len(steps) {
				t.Fatalf("%d steps ran in %d Runs, want one each", len(steps), len(runs))
			}
			want := textbookOps(c)
			for i, run := range runs {
				begin := slices.IndexFunc(run, func(call string) bool { return opName(call) == "UploadStep" })
				if begin < 0 {
					t.Fatalf("step %d: no UploadStep in %v", i, run)
				}
				for _, call := range run[:begin] {
					if op := opName(call); op != "NewTensor" && op != "Free" {
						t.Errorf("step %d: %s before the step began", i, call)
					}
				}
				if i > 0 && begin > 0 {
					t.Errorf("step %d: allocated %v though no step was larger than the first", i, run[:begin])
				}
				var ops []string
				for _, call := range run[begin:] {
					ops = append(ops, opName(call))
				}
				if !slices.Equal(ops, want) {
					t.Errorf("step %d: ops\n%v\nwant\n%v", i, ops, want)
				}
			}
			if !slices.Equal(runs[1], runs[2]) {
				t.Errorf("two decode steps of one size differ:\n%v\n%v", runs[1], runs[2])
			}

			// Copy-on-write orders go to the backend, inside a Run of their own.
			if err := kv.CopyBlocks([]backend.BlockCopy{{Src: 3, Dst: 5}}); err != nil {
				t.Fatal(err)
			}
			if last := rec.runs[len(rec.runs)-1]; !slices.Equal(last, []string{fmt.Sprint("CopyBlocks(", []backend.BlockCopy{{Src: 3, Dst: 5}}, ")")}) {
				t.Errorf("copy blocks ran as %v", last)
			}
			if len(rec.violations) > 0 {
				t.Errorf("backend calls outside Run: %v", rec.violations)
			}
		})
	}
}
