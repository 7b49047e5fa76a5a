package quantize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// tinyModel is a random-weight Llama with rows of 256 (one k-quant block).
func tinyModel(t *testing.T) *format.Model {
	t.Helper()
	c := format.Config{Arch: "llama", VocabSize: 300, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
		FFNDim: 512, ContextLen: 64, NormEps: 1e-5, RopeTheta: 10000, RopeDim: 64}
	m, err := synth.Model(synth.Shape{Name: "tiny", Config: c}, quant.F32, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func calibration() [][]int32 {
	seq := make([]int32, 32)
	for i := range seq {
		seq[i] = int32(1 + (i*37)%299)
	}
	return [][]int32{seq, seq}
}

// TestQuantizeRefusesAndLeavesNothing: gptq onto q2_k, an unknown method, missing
// calibration and a mixture of experts fail with clear errors and no file.
func TestQuantizeRefusesAndLeavesNothing(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "o.gguf")
	q2k, _ := ParsePlan("q2_k")
	q40, _ := ParsePlan("q4_0")
	moe := m.WithTensors(m.Tensors)
	moe.Config.Experts = 2
	cases := []struct {
		m    *format.Model
		opt  Options
		want string
	}{
		{m, Options{Plan: q2k, Method: "gptq", Calibration: calibration()}, "GPTQ here quantizes onto q4_0"},
		{m, Options{Plan: q40, Method: "sparse"}, "unknown method"},
		{m, Options{Plan: q40, Method: "awq"}, "needs calibration text"},
		{moe, Options{Plan: q40, Method: "awq", Calibration: calibration()}, "mixture-of-experts"},
	}
	for _, c := range cases {
		err := Quantize(c.m, out, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: error %v, want one saying %q", c.opt.Method, c.opt.Plan.Name, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestQuantizeMethodsEndToEnd runs AWQ and GPTQ with a mixed k-quant preset and GPTQ on
// q4_0 end to end on the tiny model and checks the files' types.
func TestQuantizeMethodsEndToEnd(t *testing.T) {
	m := tinyModel(t)
	for _, c := range []struct{ plan, method string }{{"q4_k_m", "awq"}, {"q4_k_m", "gptq"}, {"q4_0", "gptq"}} {
		plan, err := ParsePlan(c.plan)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "o.gguf")
		if err := Quantize(m, out, Options{Plan: plan, Method: c.method, Calibration: calibration(), Threads: 2, AWQ: AWQOptions{GridPoints: 3}}); err != nil {
			t.Fatal(err)
		}
		back, err := format.Open(out, format.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range back.Tensors {
			if want := plan.TypeFor(tt.Name, tt.Shape, 2, false); tt.Type != want {
				t.Errorf("%s %s: %s is %s, want %s", c.plan, c.method, tt.Name, tt.Type, want)
			}
		}
		back.Close()
	}
}
