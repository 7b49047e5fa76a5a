package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// fusingBackend is a CPU backend that offers the fused projections (MatMuls for q/k/v,
// MatMulSwiGLU for gate/up), built from its own ops, and counts their calls.
type fusingBackend struct {
	*cpubackend.Backend
	multi, swiglu int
}

func (f *fusingBackend) MatMuls(outs []backend.Tensor, x backend.Tensor, ws []backend.Tensor) error {
	f.multi++
	for i, w := range ws {
		if err := f.MatMul(outs[i], x, w); err != nil {
			return err
		}
	}
	return nil
}

func (f *fusingBackend) MatMulSwiGLU(out, x, gate, up backend.Tensor) error {
	f.swiglu++
	u, err := f.NewTensor(quant.F32, out.Shape()...)
	if err != nil {
		return err
	}
	if err := f.MatMul(out, x, gate); err != nil {
		return err
	}
	if err := f.MatMul(u, x, up); err != nil {
		return err
	}
	return f.SwiGLU(out, out, u)
}

// TestFusedProjections: a backend with fused q/k/v and gate/up/SwiGLU gets them called
// once per layer and step, and the model's logits are those of the unfused ops.
func TestFusedProjections(t *testing.T) {
	for _, shape := range []string{"qwen2.5-0.5b", "mixtral-tiny"} {
		s, err := synth.Lookup(shape)
		if err != nil {
			t.Fatal(err)
		}
		c := smallConfig(s.Config)
		fm := writeTwin(t, c, quant.F32, synth.GGUF)
		want, wantLogits := generate(t, mustModel(t, fm, Options{Backends: cpuBackends(t, 1, Parallel{})}), testTokens(13), 6)
		fb := &fusingBackend{Backend: cpubackend.New(1)}
		defer fb.Close()
		got, gotLogits := generate(t, mustModel(t, fm, Options{Backends: []backend.Backend{fb}}), testTokens(13), 6)
		if e := relErr(gotLogits, wantLogits); e != 0 || len(got) != len(want) {
			t.Errorf("%s: fused projections change the logits by %g", shape, e)
		}
		steps := 3 + 6 // prefill chunks of 5 tokens, then decode steps
		if fb.multi != steps*c.Layers {
			t.Errorf("%s: MatMuls called %d times, want %d", shape, fb.multi, steps*c.Layers)
		}
		wantSwiGLU := steps * c.Layers
		if c.Experts > 0 && c.SharedExpertFFN == 0 {
			wantSwiGLU = 0 // routed experts run in ExpertMLP
		}
		if fb.swiglu != wantSwiGLU {
			t.Errorf("%s: MatMulSwiGLU called %d times, want %d", shape, fb.swiglu, wantSwiGLU)
		}
	}
}

// mustModel makes a Model of fm, closed at the test's end.
func mustModel(t *testing.T, fm *format.Model, opt Options) *Model {
	t.Helper()
	m, err := New(fm, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}
