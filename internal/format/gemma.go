package format

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Gemma 2 and Gemma 3 (text) differ from the Llama family in ways the Config spells out:
// the embeddings are scaled by sqrt(Dim), every block's attention and MLP outputs are
// RMS-normalized again before they join the residual stream (attn_post_norm,
// ffn_post_norm), the MLP is GeGLU with tanh-approximate GELU, attention scores are
// scaled by query_pre_attn_scalar^-1/2, local layers attend through a sliding window
// between global ones, and Gemma 2 soft-caps attention scores and logits. Gemma's
// RMSNorm multiplies by (1 + w): Hugging Face checkpoints store w, llama.cpp's converter
// stores w + 1, and kvasir holds every norm weight as GGUF does, adding 1 when it reads a
// safetensors folder and taking it off when it writes one.

// isGemma reports whether arch is a GGUF Gemma architecture kvasir runs.
func isGemma(arch string) bool { return arch == "gemma2" || arch == "gemma3" }

// gemmaHFLayerNames are the per-layer Hugging Face names whose GGUF twins differ from the
// Llama family's: Gemma has four norms per block.
var gemmaHFLayerNames = map[string]string{
	"post_attention_layernorm.weight":   "post_attention_norm.weight",
	"pre_feedforward_layernorm.weight":  "ffn_norm.weight",
	"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}

// gemmaNormShifted reports whether a tensor (GGUF name) of a Gemma model is a norm weight
// stored as w on the Hugging Face side and w + 1 in GGUF.
func gemmaNormShifted(arch, name string) bool {
	return isGemma(arch) && strings.HasSuffix(name, "norm.weight")
}

// gemmaQueryScalar returns llama.cpp's query_pre_attn_scalar for a GGUF Gemma, which
// stores none: the head size, except for the 27B models (46 layers for Gemma 2, 62 for
// Gemma 3), which scale by hidden size over heads.
func gemmaQueryScalar(c *Config) float64 {
	if (c.Arch == "gemma2" && c.Layers == 46) || (c.Arch == "gemma3" && c.Layers == 62) {
		return float64(c.Dim / c.Heads)
	}
	return float64(c.HeadDim)
}

// gemmaCommon sets the Config fields every Gemma shares.
func gemmaCommon(c *Config) {
	c.Activation, c.PostNorms, c.RopeStyle = "gelu_tanh", true, RopeNeox
	c.EmbedScale = math.Sqrt(float64(c.Dim))
	c.QKNorm = c.Arch == "gemma3"
}

// gemmaFromGGUF completes a Gemma Config from llama.cpp's keys and conventions.
func gemmaFromGGUF(f *gguf.File, c *Config) {
	arch := c.Arch
	getf := func(key string, def float64) float64 {
		if v, ok := f.GetFloat64(arch + "." + key); ok {
			return v
		}
		return def
	}
	gemmaCommon(c)
	c.AttnScale = 1 / math.Sqrt(gemmaQueryScalar(c))
	if arch == "gemma2" {
		c.SlidingWindowPattern = 2
		c.AttnSoftcap = getf("attn_logit_softcapping", 50)
		c.FinalSoftcap = getf("final_logit_softcapping", 30)
	} else {
		c.SlidingWindowPattern = 6
		c.RopeThetaLocal = getf("rope.freq_base_swa", 10000)
		c.FinalSoftcap = getf("final_logit_softcapping", 0)
	}
}

// gemmaGGUFMetadata returns the Gemma keys GGUFMetadata adds.
func gemmaGGUFMetadata(c Config) []gguf.KV {
	f := func(key string, v float64) gguf.KV {
		return gguf.KV{Key: c.Arch + "." + key, Value: gguf.Float32(float32(v))}
	}
	var kvs []gguf.KV
	if c.AttnSoftcap > 0 {
		kvs = append(kvs, f("attn_logit_softcapping", c.AttnSoftcap))
	}
	if c.FinalSoftcap > 0 {
		kvs = append(kvs, f("final_logit_softcapping", c.FinalSoftcap))
	}
	if c.Arch == "gemma3" && c.RopeThetaLocal > 0 {
		kvs = append(kvs, f("rope.freq_base_swa", c.RopeThetaLocal))
	}
	return kvs
}

// checkGemmaGGUF refuses a Gemma Config that a GGUF file cannot carry: llama.cpp fixes the
// window alternation and the query scale rather than storing them.
func checkGemmaGGUF(c Config) error {
	pattern := map[string]int{"gemma2": 2, "gemma3": 6}[c.Arch]
	if c.SlidingWindow > 0 && c.SlidingWindowPattern != pattern {
		return fmt.Errorf("gguf: %s with a sliding-window pattern of %d: llama.cpp fixes it at %d", c.Arch, c.SlidingWindowPattern, pattern)
	}
	if want := 1 / math.Sqrt(gemmaQueryScalar(&c)); c.AttnScale > 0 && math.Abs(c.AttnScale-want) > 1e-9*want {
		return fmt.Errorf("gguf: %s with an attention scale of %g: llama.cpp implies %g", c.Arch, c.AttnScale, want)
	}
	return nil
}

// gemmaFromHF completes a Gemma Config from config.json.
func gemmaFromHF(h *hfconfig.Config, c *Config) error {
	g := h.Gemma
	if g.HiddenActivation != "gelu_pytorch_tanh" && g.HiddenActivation != "gelu_tanh" {
		return fmt.Errorf("hidden_activation %q is not supported (want gelu_pytorch_tanh)", g.HiddenActivation)
	}
	gemmaCommon(c)
	c.AttnScale = 1 / math.Sqrt(g.QueryPreAttnScalar)
	c.AttnSoftcap, c.FinalSoftcap = g.AttnLogitSoftcapping, g.FinalLogitSoftcapping
	c.RopeThetaLocal = g.RopeLocalBaseFreq
	pattern, ok := windowPattern(g.LayerTypes)
	switch {
	case !ok:
		return fmt.Errorf("layer_types %v: the full-attention layers do not recur at a fixed interval", g.LayerTypes)
	case pattern < 0:
		c.SlidingWindow = 0 // every layer global
	default:
		c.SlidingWindowPattern = pattern
	}
	return nil
}

// windowPattern returns the SlidingWindowPattern that gives layer types types: 0 when
// every layer is windowed, -1 when none is, false when no interval fits.
func windowPattern(types []string) (int, bool) {
	full := 0
	for _, t := range types {
		if t == hfconfig.FullAttention {
			full++
		}
	}
	switch full {
	case 0:
		return 0, true
	case len(types):
		return -1, true
	}
	for n := 2; n <= len(types); n++ {
		if slicesEqual(types, hfconfig.PatternLayers(len(types), n)) {
			return n, true
		}
	}
	return 0, false
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gemmaToHF sets the Gemma keys of config.json from c.
func gemmaToHF(c Config, h *hfconfig.Config) {
	g := &h.Gemma
	g.HiddenActivation = "gelu_pytorch_tanh"
	g.QueryPreAttnScalar = float64(c.HeadDim)
	if c.AttnScale > 0 {
		g.QueryPreAttnScalar = 1 / (c.AttnScale * c.AttnScale)
	}
	g.AttnLogitSoftcapping, g.FinalLogitSoftcapping = c.AttnSoftcap, c.FinalSoftcap
	g.RopeLocalBaseFreq = c.RopeThetaLocal
	if c.Arch == "gemma3" && g.RopeLocalBaseFreq == 0 {
		g.RopeLocalBaseFreq = c.RopeTheta
	}
	g.LayerTypes = make([]string, c.Layers)
	for l := range g.LayerTypes {
		g.LayerTypes[l] = hfconfig.FullAttention
		if c.LayerWindow(l) > 0 {
			g.LayerTypes[l] = hfconfig.SlidingAttention
		}
	}
	h.SlidingWindow, h.UseSlidingWindow = c.SlidingWindow, c.SlidingWindow > 0
	if c.SlidingWindow == 0 {
		h.SlidingWindow = 4096 // unused: every layer is full
	}
}

// shiftNorm returns a norm weight with delta added to every value, as F32.
func shiftNorm(t *Tensor, delta float32) (*Tensor, error) {
	vals := make([]float32, t.Elements())
	if err := quant.Dequantize(t.Type, t.Data, vals); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	for i := range vals {
		vals[i] += delta
	}
	data := make([]byte, 4*len(vals))
	if err := quant.Quantize(quant.F32, vals, data); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return &Tensor{Name: t.Name, Type: quant.F32, Shape: t.Shape, Data: data}, nil
}

// unshiftedWriter returns the writer of a Gemma norm weight as Hugging Face stores it: the
// tensor's values less 1, in its own type.
func unshiftedWriter(t *OutTensor) func(w io.Writer) error {
	return func(w io.Writer) error {
		var buf bytes.Buffer
		if err := t.writeTo(&buf); err != nil {
			return err
		}
		shifted, err := shiftNorm(&Tensor{Name: t.Name, Type: t.Type, Shape: t.Shape, Data: buf.Bytes()}, -1)
		if err != nil {
			return err
		}
		data := shifted.Data
		if t.Type != quant.F32 {
			vals := make([]float32, shifted.Elements())
			if err := quant.Dequantize(quant.F32, shifted.Data, vals); err != nil {
				return err
			}
			size, err := t.Size()
			if err != nil {
				return err
			}
			data = make([]byte, size)
			if err := quant.Quantize(t.Type, vals, data); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
		}
		_, err = w.Write(data)
		return err
	}
}
