package format

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
)

// TestGemmaConfigFromHF maps Gemma 2 2B's and Gemma 3 1B's config.json onto a Config.
func TestGemmaConfigFromHF(t *testing.T) {
	for _, tc := range []struct {
		file        string
		arch        string
		embed       float64
		pattern     int
		attn, final float64
		local       float64
	}{
		{"gemma2.json", "gemma2", 48, 2, 50, 30, 0},
		{"gemma3.json", "gemma3", math.Sqrt(1152), 6, 0, 0, 10000},
	} {
		h, err := hfconfig.ReadConfig(filepath.Join("hfconfig", "testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromHF(h)
		if err != nil {
			t.Fatal(err)
		}
		if c.Arch != tc.arch || c.Activation != "gelu_tanh" || !c.PostNorms || c.EmbedScale != tc.embed ||
			c.AttnScale != 1.0/16 || c.SlidingWindowPattern != tc.pattern || c.AttnSoftcap != tc.attn ||
			c.FinalSoftcap != tc.final || c.RopeThetaLocal != tc.local || c.RopeStyle != RopeNeox ||
			c.QKNorm != (tc.arch == "gemma3") || !c.TiedEmbeddings {
			t.Errorf("%s: %+v", tc.file, c)
		}
		// Layer 0 is windowed; the first global layer is pattern-1.
		if c.LayerWindow(0) != c.SlidingWindow || c.LayerWindow(tc.pattern-1) != 0 || c.LayerWindow(tc.pattern) != c.SlidingWindow {
			t.Errorf("%s: layer windows %d %d %d", tc.file, c.LayerWindow(0), c.LayerWindow(tc.pattern-1), c.LayerWindow(tc.pattern))
		}
		// And back: config.json carries the same.
		h2, err := ConfigToHF(c, 0)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ConfigFromHF(h2)
		if err != nil {
			t.Fatal(err)
		}
		if c2.AttnScale != c.AttnScale || c2.SlidingWindowPattern != c.SlidingWindowPattern || c2.SlidingWindow != c.SlidingWindow ||
			c2.AttnSoftcap != c.AttnSoftcap || c2.FinalSoftcap != c.FinalSoftcap || c2.RopeThetaLocal != c.RopeThetaLocal {
			t.Errorf("%s: round trip %+v, want %+v", tc.file, c2, c)
		}
	}
}

func TestWindowPattern(t *testing.T) {
	s, f := hfconfig.SlidingAttention, hfconfig.FullAttention
	for _, tc := range []struct {
		types   []string
		pattern int
		ok      bool
	}{
		{[]string{s, s, s}, 0, true},
		{[]string{f, f}, -1, true},
		{[]string{s, f, s, f}, 2, true},
		{[]string{s, s, f, s, s, f, s}, 3, true},
		{[]string{f, s, s}, 0, false},
		{[]string{s, f, f, s}, 0, false},
	} {
		p, ok := windowPattern(tc.types)
		if p != tc.pattern || ok != tc.ok {
			t.Errorf("%v: pattern %d %v, want %d %v", tc.types, p, ok, tc.pattern, tc.ok)
		}
	}
}

// TestGemmaGGUFRefusesWhatItCannotCarry: llama.cpp fixes Gemma's window alternation and
// query scale, so a GGUF of other values is refused rather than written wrong.
func TestGemmaGGUFRefusesWhatItCannotCarry(t *testing.T) {
	c := Config{Arch: "gemma2", Dim: 64, Heads: 2, HeadDim: 32, Layers: 2, SlidingWindow: 8, SlidingWindowPattern: 3}
	if err := checkGemmaGGUF(c); err == nil || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("pattern 3: %v", err)
	}
	c.SlidingWindowPattern, c.AttnScale = 2, 0.5
	if err := checkGemmaGGUF(c); err == nil || !strings.Contains(err.Error(), "scale") {
		t.Errorf("scale 0.5: %v", err)
	}
	c.AttnScale = 1 / math.Sqrt(32)
	if err := checkGemmaGGUF(c); err != nil {
		t.Errorf("llama.cpp's own values refused: %v", err)
	}
}

// TestGemmaHFNames: Gemma's four norms a block have names of their own both ways.
func TestGemmaHFNames(t *testing.T) {
	for hf, g := range map[string]string{
		"model.layers.3.input_layernorm.weight":            "blk.3.attn_norm.weight",
		"model.layers.3.post_attention_layernorm.weight":   "blk.3.post_attention_norm.weight",
		"model.layers.3.pre_feedforward_layernorm.weight":  "blk.3.ffn_norm.weight",
		"model.layers.3.post_feedforward_layernorm.weight": "blk.3.post_ffw_norm.weight",
		"model.layers.3.self_attn.q_norm.weight":           "blk.3.attn_q_norm.weight",
		"model.norm.weight":                                "output_norm.weight",
	} {
		if got, ok := GGUFNameFor(hf, "gemma3"); !ok || got != g {
			t.Errorf("%s: %q %v, want %q", hf, got, ok, g)
		}
		if back, err := HFName(g, "gemma2"); err != nil || back != hf {
			t.Errorf("%s: back to %q (%v), want %q", g, back, err, hf)
		}
	}
	// The Llama family keeps its meaning of post_attention_layernorm.
	if got, _ := GGUFNameFor("model.layers.0.post_attention_layernorm.weight", "llama"); got != "blk.0.ffn_norm.weight" {
		t.Errorf("llama post_attention_layernorm -> %q", got)
	}
}

// TestGraniteConfigFromHF maps Granite's multipliers onto the Config (the logits divided
// by logits_scaling) and back.
func TestGraniteConfigFromHF(t *testing.T) {
	h, err := hfconfig.ReadConfig(filepath.Join("hfconfig", "testdata", "granite.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ConfigFromHF(h)
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "granite" || c.EmbedScale != 12 || c.ResidualScale != 0.22 || c.AttnScale != 0.015625 || c.LogitScale != 0.125 || c.RopeStyle != RopeNeox {
		t.Errorf("%+v", c)
	}
	h2, err := ConfigToHF(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Architecture != hfconfig.Granite || h2.Granite != h.Granite {
		t.Errorf("back: %s %+v, want %+v", h2.Architecture, h2.Granite, h.Granite)
	}
}

// TestOlmo2ConfigFromHF: OLMo 2's block, post-norms only and a QK norm over all heads.
func TestOlmo2ConfigFromHF(t *testing.T) {
	h, err := hfconfig.ReadConfig(filepath.Join("hfconfig", "testdata", "olmo2.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ConfigFromHF(h)
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "olmo2" || !c.PostNorms || !c.NoPreNorms || !c.QKNorm || !c.QKNormFull || c.RopeStyle != RopeNeox {
		t.Errorf("%+v", c)
	}
	if got, ok := GGUFNameFor("model.layers.2.post_attention_layernorm.weight", "olmo2"); !ok || got != "blk.2.post_attention_norm.weight" {
		t.Errorf("post_attention_layernorm -> %q", got)
	}
}
