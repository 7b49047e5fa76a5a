package kvasir

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
)

// GenerationConfig says where the default sampling parameters of requests come from, as
// vLLM's --generation-config does: the model's generation_config.json over vLLM's
// neutral defaults (the zero value, "auto"), the neutral defaults alone ("vllm"), or the
// generation_config.json of another folder.
type GenerationConfig struct {
	// Neutral ignores every generation_config.json ("vllm").
	Neutral bool
	// Dir, when set, is the folder whose generation_config.json is read instead of the
	// model's.
	Dir string
}

// ParseGenerationConfig reads a --generation-config value: "auto" (or ""), "vllm", or a
// folder holding a generation_config.json.
func ParseGenerationConfig(s string) (GenerationConfig, error) {
	switch s {
	case "", "auto":
		return GenerationConfig{}, nil
	case "vllm":
		return GenerationConfig{Neutral: true}, nil
	}
	if strings.ContainsRune(s, 0) {
		return GenerationConfig{}, fmt.Errorf("generation config %q: want auto, vllm or a folder", s)
	}
	return GenerationConfig{Dir: s}, nil
}

// String returns the value as ParseGenerationConfig reads it.
func (g GenerationConfig) String() string {
	switch {
	case g.Neutral:
		return "vllm"
	case g.Dir != "":
		return g.Dir
	}
	return "auto"
}

// read returns the generation_config.json that applies to a model whose own is own (nil
// when it has none): own for auto, nil for vllm, or the one in Dir.
func (g GenerationConfig) read(own *hfconfig.GenerationConfig) (*hfconfig.GenerationConfig, error) {
	switch {
	case g.Neutral:
		return nil, nil
	case g.Dir == "":
		return own, nil
	}
	if st, err := os.Stat(g.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("generation config %s: not a folder", g.Dir)
	}
	gc, err := hfconfig.ReadGenerationConfig(filepath.Join(g.Dir, "generation_config.json"))
	if err != nil {
		return nil, fmt.Errorf("generation config: %w", err)
	}
	return gc, nil
}

// SamplingDefaults are the sampling parameters a request gets for the fields it leaves
// unset (request fields and command-line flags override them).
type SamplingDefaults struct {
	Temperature, TopP float32
	// TopK is 0 for off.
	TopK              int
	MinP              float32
	RepetitionPenalty float32
}

// NeutralSampling returns vLLM's neutral defaults: temperature 1, top_p 1, top_k off,
// min_p 0, repetition_penalty 1.
func NeutralSampling() SamplingDefaults {
	return SamplingDefaults{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
}

// With returns d with the sampling values a generation_config.json sets laid over it (nil:
// d): its temperature, top_p, top_k, min_p and repetition_penalty, as vLLM takes them
// (do_sample is not read). NeutralSampling().With(g) are the defaults g gives a model.
func (d SamplingDefaults) With(g *hfconfig.GenerationConfig) SamplingDefaults {
	if g == nil {
		return d
	}
	set := func(dst *float32, v *float64) {
		if v != nil {
			*dst = float32(*v)
		}
	}
	set(&d.Temperature, g.Temperature)
	set(&d.TopP, g.TopP)
	set(&d.MinP, g.MinP)
	set(&d.RepetitionPenalty, g.RepetitionPenalty)
	if g.TopK != nil {
		d.TopK = *g.TopK
	}
	return d
}

// Params returns sampling parameters holding the defaults, every other field zero.
func (d SamplingDefaults) Params() SamplingParams {
	return SamplingParams{Temperature: d.Temperature, TopP: d.TopP, TopK: d.TopK, MinP: d.MinP, RepetitionPenalty: d.RepetitionPenalty}
}

// String lists the defaults, as "temperature 1, top_p 1, top_k off, min_p 0,
// repetition_penalty 1".
func (d SamplingDefaults) String() string {
	f := func(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }
	k := "off"
	if d.TopK > 0 {
		k = strconv.Itoa(d.TopK)
	}
	return fmt.Sprintf("temperature %s, top_p %s, top_k %s, min_p %s, repetition_penalty %s",
		f(d.Temperature), f(d.TopP), k, f(d.MinP), f(d.RepetitionPenalty))
}
