package kvasir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestParseGenerationConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want GenerationConfig
	}{
		{"", GenerationConfig{}}, {"auto", GenerationConfig{}}, {"vllm", GenerationConfig{Neutral: true}},
		{"./models/qwen", GenerationConfig{Dir: "./models/qwen"}},
	} {
		got, err := ParseGenerationConfig(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseGenerationConfig(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseGenerationConfig("a\x00b"); err == nil {
		t.Error("a folder name with a NUL byte accepted")
	}
}

// FuzzParseGenerationConfig: a value read back from its String is itself; nothing panics.
func FuzzParseGenerationConfig(f *testing.F) {
	for _, s := range []string{"auto", "vllm", "", "/tmp/x", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGenerationConfig(s)
		if err != nil {
			return
		}
		if again, err := ParseGenerationConfig(g.String()); err != nil || again != g {
			t.Fatalf("ParseGenerationConfig(%q) = %+v, whose String %q reads as %+v, %v", s, g, g.String(), again, err)
		}
	})
}

func TestSamplingDefaultsWith(t *testing.T) {
	neutral := SamplingDefaults{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	if got := NeutralSampling(); got != neutral {
		t.Errorf("neutral defaults %+v, want vLLM's %+v", got, neutral)
	}
	if got := NeutralSampling().With(nil); got != neutral {
		t.Errorf("no generation config: %+v", got)
	}
	// TinyStories-656K's file sets token ids only: the neutral defaults stay.
	g, err := hfconfig.ReadGenerationConfig(testdata.Path(t, "models/tinystories-656k/generation_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := NeutralSampling().With(g); got != neutral {
		t.Errorf("tinystories-656k: %+v", got)
	}
	// A Qwen3-like file: what it sets wins, the rest stays neutral.
	g, err = hfconfig.ParseGenerationConfig([]byte(`{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95}`))
	if err != nil {
		t.Fatal(err)
	}
	want := SamplingDefaults{Temperature: 0.6, TopP: 0.95, TopK: 20, RepetitionPenalty: 1}
	if got := NeutralSampling().With(g); got != want {
		t.Errorf("qwen3-like: %+v, want %+v", got, want)
	}
	if s := want.String(); s != "temperature 0.6, top_p 0.95, top_k 20, min_p 0, repetition_penalty 1" {
		t.Errorf("String: %q", s)
	}
	p := want.Params()
	if p.Temperature != 0.6 || p.TopP != 0.95 || p.TopK != 20 || p.MinP != 0 || p.RepetitionPenalty != 1 || p.MaxTokens != 0 || p.Seed != nil {
		t.Errorf("Params: %+v", p)
	}
}

// TestEngineSamplingDefaults: the engine's defaults follow --generation-config: the model's
// generation_config.json (auto), none (vllm), or another folder's.
func TestEngineSamplingDefaults(t *testing.T) {
	own := `{"temperature": 0.7, "top_p": 0.8, "repetition_penalty": 1.05}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"temperature": 0.2, "min_p": 0.1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(gc GenerationConfig) (SamplingDefaults, error) {
		fm := tinySynth(t)
		g, err := hfconfig.ParseGenerationConfig([]byte(own))
		if err != nil {
			t.Fatal(err)
		}
		fm.Generation = g
		e, err := OpenModel(fm, Options{Threads: 1, GenerationConfig: gc})
		if err != nil {
			fm.Close()
			return SamplingDefaults{}, err
		}
		defer e.Close()
		return e.SamplingDefaults(), nil
	}
	for _, tc := range []struct {
		gc   GenerationConfig
		want SamplingDefaults
	}{
		{GenerationConfig{}, SamplingDefaults{Temperature: 0.7, TopP: 0.8, RepetitionPenalty: 1.05}},
		{GenerationConfig{Neutral: true}, NeutralSampling()},
		{GenerationConfig{Dir: dir}, SamplingDefaults{Temperature: 0.2, TopP: 1, MinP: 0.1, RepetitionPenalty: 1}},
	} {
		got, err := open(tc.gc)
		if err != nil || got != tc.want {
			t.Errorf("--generation-config %s: %+v, %v; want %+v", tc.gc, got, err, tc.want)
		}
	}
	if _, err := open(GenerationConfig{Dir: filepath.Join(dir, "missing")}); err == nil {
		t.Error("a folder that does not exist accepted")
	}
}

// tinySynth synthesizes a 2-layer model with a 320-token byte vocabulary in memory.
func tinySynth(t *testing.T) *format.Model {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 64, 4, 2, 16, 16, 128, 256
	shape.Config = c
	fm, err := synth.Model(shape, quant.F32, 7)
	if err != nil {
		t.Fatal(err)
	}
	return fm
}
