// Package synth makes random-weight models of real shapes, deterministic for a seed, so that
// tests and benchmarks get the sizes of real models without downloading any.
package synth

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// Shape is a named model shape: the hyperparameters of a real model.
type Shape struct {
	Name string
	// HFArch is the Hugging Face architecture class the shape is written as.
	HFArch string
	Config format.Config
}

func llama(dim, ffn, layers, heads, kvHeads, vocab, ctx int, theta float64) format.Config {
	hd := dim / heads
	return format.Config{
		Arch: "llama", VocabSize: vocab, Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads,
		HeadDim: hd, RopeDim: hd, FFNDim: ffn, ContextLen: ctx, NormEps: 1e-5, RopeTheta: theta,
	}
}

// gemma returns a Gemma config: tied embeddings scaled by sqrt(dim), GeGLU, post-norms,
// NeoX rotary and scores scaled by head size (query_pre_attn_scalar = head_dim).
func gemma(arch string, dim, ffn, layers, heads, kvHeads, headDim, vocab, ctx int, theta float64) format.Config {
	return format.Config{
		Arch: arch, VocabSize: vocab, Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads,
		HeadDim: headDim, RopeDim: headDim, FFNDim: ffn, ContextLen: ctx, NormEps: 1e-6, RopeTheta: theta,
		RopeStyle: format.RopeNeox, TiedEmbeddings: true, Activation: "gelu_tanh", PostNorms: true,
		EmbedScale: math.Sqrt(float64(dim)), AttnScale: 1 / math.Sqrt(float64(headDim)),
	}
}

func llama3Scaling(factor float64) format.RopeScaling {
	return format.RopeScaling{Type: "llama3", Factor: factor, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContextLen: 8192}
}

// shapes lists the built-in shapes, with hyperparameters from each model's config.json.
var shapes = func() map[string]Shape {
	smol := llama(576, 1536, 30, 9, 3, 49152, 8192, 100000)
	smol.TiedEmbeddings = true

	qwen25 := llama(896, 4864, 24, 14, 2, 151936, 32768, 1000000)
	qwen25.Arch, qwen25.NormEps, qwen25.TiedEmbeddings, qwen25.QKVBias = "qwen2", 1e-6, true, true
	qwen25.RopeStyle = format.RopeNeox

	qwen3 := llama(1024, 3072, 28, 16, 8, 151936, 40960, 1000000)
	qwen3.Arch, qwen3.NormEps, qwen3.TiedEmbeddings, qwen3.QKNorm = "qwen3", 1e-6, true, true
	qwen3.HeadDim, qwen3.RopeDim, qwen3.RopeStyle = 128, 128, format.RopeNeox

	tiny := llama(2048, 5632, 22, 32, 4, 32000, 2048, 10000)

	l1b := llama(2048, 8192, 16, 32, 8, 128256, 131072, 500000)
	l1b.TiedEmbeddings, l1b.Scaling = true, llama3Scaling(32)

	l8b := llama(4096, 14336, 32, 32, 8, 128256, 131072, 500000)
	l8b.Scaling = llama3Scaling(8)

	mix := llama(512, 1024, 4, 8, 4, 32000, 4096, 1000000)
	mix.Experts, mix.ExpertsUsed, mix.ExpertFFNDim, mix.NormTopKProbs = 8, 2, 1024, true

	// Gemma 2 2B and Gemma 3 1B, and small twins of each that keep what makes the
	// architecture (window alternation, soft-capping, QK norms, a local rotary base) for
	// tests and the transformers oracle.
	g2 := gemma("gemma2", 2304, 9216, 26, 8, 4, 256, 256000, 8192, 10000)
	g2.SlidingWindow, g2.SlidingWindowPattern, g2.AttnSoftcap, g2.FinalSoftcap = 4096, 2, 50, 30
	g2tiny := gemma("gemma2", 256, 512, 4, 4, 2, 64, 512, 8192, 10000)
	g2tiny.SlidingWindow, g2tiny.SlidingWindowPattern, g2tiny.AttnSoftcap, g2tiny.FinalSoftcap = 7, 2, 50, 30

	g3 := gemma("gemma3", 1152, 6912, 26, 4, 1, 256, 262144, 32768, 1000000)
	g3.SlidingWindow, g3.SlidingWindowPattern, g3.RopeThetaLocal, g3.QKNorm = 512, 6, 10000, true
	g3tiny := gemma("gemma3", 256, 512, 6, 4, 1, 64, 512, 32768, 1000000)
	g3tiny.SlidingWindow, g3tiny.SlidingWindowPattern, g3tiny.RopeThetaLocal, g3tiny.QKNorm = 7, 6, 10000, true

	// Phi-3-mini-4k (fused projections, a window of 2047 on every layer), and small.
	phi3 := llama(3072, 8192, 32, 32, 32, 32064, 4096, 10000)
	phi3.Arch, phi3.RopeStyle, phi3.SlidingWindow = "phi3", format.RopeNeox, 2047
	phi3tiny := llama(256, 512, 4, 4, 4, 512, 4096, 10000)
	phi3tiny.Arch, phi3tiny.RopeStyle, phi3tiny.SlidingWindow = "phi3", format.RopeNeox, 7

	// Granite 3.0 2B's multipliers, and small.
	gr := llama(2048, 8192, 40, 32, 8, 49155, 4096, 10000)
	gr.Arch, gr.TiedEmbeddings = "granite", true
	gr.EmbedScale, gr.ResidualScale, gr.AttnScale, gr.LogitScale = 12, 0.22, 0.015625, 1.0/8
	grtiny := llama(256, 512, 4, 4, 2, 512, 4096, 10000)
	grtiny.Arch, grtiny.TiedEmbeddings = "granite", true
	grtiny.EmbedScale, grtiny.ResidualScale, grtiny.AttnScale, grtiny.LogitScale = 12, 0.22, 0.0625, 1.0/8

	// OLMo 2 1B (post-norms only, QK norm over the whole projection), and small.
	olmo := llama(2048, 8192, 16, 16, 16, 100352, 4096, 500000)
	olmo.Arch, olmo.NormEps = "olmo2", 1e-6
	olmo.RopeStyle, olmo.PostNorms, olmo.NoPreNorms, olmo.QKNorm, olmo.QKNormFull = format.RopeNeox, true, true, true, true
	olmoTiny := llama(256, 512, 4, 4, 2, 512, 4096, 500000)
	olmoTiny.Arch, olmoTiny.NormEps = "olmo2", 1e-6
	olmoTiny.RopeStyle, olmoTiny.PostNorms, olmoTiny.NoPreNorms, olmoTiny.QKNorm, olmoTiny.QKNormFull = format.RopeNeox, true, true, true, true

	// Mistral 7B v0.1's sliding window on every layer, small.
	mistralSWA := llama(256, 512, 4, 4, 2, 512, 4096, 10000)
	mistralSWA.SlidingWindow = 7

	// A small DeepSeek-V2: multi-head latent attention with a q rank (llama.cpp reads
	// attn_q_a/attn_q_b for every layer count but the Lite model's 27), one leading dense
	// layer, then routed experts with a shared one and a routed scale; cached vectors of
	// 16 + 48 = 64 values a token.
	dsTiny := llama(256, 512, 4, 4, 4, 512, 4096, 10000)
	dsTiny.Arch, dsTiny.NormEps = "deepseek2", 1e-6
	dsTiny.QLoRARank, dsTiny.KVLoRARank, dsTiny.QKNopeDim, dsTiny.VHeadDim, dsTiny.RopeDim = 64, 48, 32, 32, 16
	dsTiny.HeadDim, dsTiny.KVHeads, dsTiny.AttnScale = 16+48, 1, 1/math.Sqrt(32+16)
	dsTiny.Experts, dsTiny.ExpertsUsed, dsTiny.ExpertFFNDim, dsTiny.SharedExpertFFN = 8, 2, 128, 128
	dsTiny.LeadingDenseLayers, dsTiny.ExpertScale = 1, 1.5

	// Small Qwen MoEs for the transformers oracle: Qwen2-MoE's routing without
	// renormalization and its sigmoid-gated shared expert; Qwen3-MoE's renormalized
	// routing, QK norms and no shared expert.
	q2moe := llama(256, 256, 2, 4, 2, 512, 4096, 1000000)
	q2moe.Arch, q2moe.NormEps, q2moe.RopeStyle, q2moe.QKVBias = "qwen2moe", 1e-6, format.RopeNeox, true
	q2moe.Experts, q2moe.ExpertsUsed, q2moe.ExpertFFNDim, q2moe.SharedExpertFFN = 8, 2, 128, 256
	q3moe := llama(256, 256, 2, 4, 2, 512, 4096, 1000000)
	q3moe.Arch, q3moe.NormEps, q3moe.RopeStyle, q3moe.QKNorm = "qwen3moe", 1e-6, format.RopeNeox, true
	q3moe.Experts, q3moe.ExpertsUsed, q3moe.ExpertFFNDim, q3moe.NormTopKProbs = 8, 2, 128, true

	// DeepSeek-V3's routing on the same model: sigmoid scores with a selection bias, the
	// best 2 of 4 groups of 2 experts, renormalized and scaled by 2.5.
	ds3Tiny := dsTiny
	ds3Tiny.ExpertSigmoid, ds3Tiny.ExpertGroups, ds3Tiny.ExpertGroupsUsed = true, 4, 2
	ds3Tiny.NormTopKProbs, ds3Tiny.ExpertScale = true, 2.5

	// DeepSeek-V2-Lite's attention (no q rank, kv rank 512, rope 64, nope 128, value 128,
	// 16 heads: a cached vector of 64 + 512 = 576 values, the released models') in a
	// small model of two layers, a dense one then a small MoE, so that tests run the
	// released geometry of the cache without a download.
	dsLiteAttn := llama(512, 512, 2, 16, 1, 512, 4096, 10000)
	dsLiteAttn.Arch, dsLiteAttn.NormEps = "deepseek2", 1e-6
	dsLiteAttn.KVLoRARank, dsLiteAttn.QKNopeDim, dsLiteAttn.VHeadDim, dsLiteAttn.RopeDim = 512, 128, 128, 64
	dsLiteAttn.HeadDim, dsLiteAttn.AttnScale = 64+512, 1/math.Sqrt(128+64)
	dsLiteAttn.Experts, dsLiteAttn.ExpertsUsed, dsLiteAttn.ExpertFFNDim, dsLiteAttn.SharedExpertFFN = 8, 2, 128, 128
	dsLiteAttn.LeadingDenseLayers, dsLiteAttn.ExpertScale = 1, 1

	return map[string]Shape{
		"deepseek-v2-lite-attn": {"deepseek-v2-lite-attn", "DeepseekV2ForCausalLM", dsLiteAttn},
		"deepseek-v3-tiny":      {"deepseek-v3-tiny", "DeepseekV3ForCausalLM", ds3Tiny},
		"qwen2moe-tiny":         {"qwen2moe-tiny", "Qwen2MoeForCausalLM", q2moe},
		"qwen3moe-tiny":         {"qwen3moe-tiny", "Qwen3MoeForCausalLM", q3moe},
		"deepseek-v2-tiny":      {"deepseek-v2-tiny", "DeepseekV2ForCausalLM", dsTiny},
		"smollm2-135m":          {"smollm2-135m", "LlamaForCausalLM", smol},
		"qwen2.5-0.5b":          {"qwen2.5-0.5b", "Qwen2ForCausalLM", qwen25},
		"qwen3-0.6b":            {"qwen3-0.6b", "Qwen3ForCausalLM", qwen3},
		"tinyllama-1.1b":        {"tinyllama-1.1b", "LlamaForCausalLM", tiny},
		"llama-3.2-1b":          {"llama-3.2-1b", "LlamaForCausalLM", l1b},
		"llama-3.1-8b":          {"llama-3.1-8b", "LlamaForCausalLM", l8b},
		"mixtral-tiny":          {"mixtral-tiny", "MixtralForCausalLM", mix},
		"gemma2-2b":             {"gemma2-2b", "Gemma2ForCausalLM", g2},
		"gemma2-tiny":           {"gemma2-tiny", "Gemma2ForCausalLM", g2tiny},
		"gemma3-1b":             {"gemma3-1b", "Gemma3ForCausalLM", g3},
		"gemma3-tiny":           {"gemma3-tiny", "Gemma3ForCausalLM", g3tiny},
		"mistral-swa-tiny":      {"mistral-swa-tiny", "MistralForCausalLM", mistralSWA},
		"phi3-mini":             {"phi3-mini", "Phi3ForCausalLM", phi3},
		"phi3-tiny":             {"phi3-tiny", "Phi3ForCausalLM", phi3tiny},
		"granite-3-2b":          {"granite-3-2b", "GraniteForCausalLM", gr},
		"granite-tiny":          {"granite-tiny", "GraniteForCausalLM", grtiny},
		"olmo2-1b":              {"olmo2-1b", "Olmo2ForCausalLM", olmo},
		"olmo2-tiny":            {"olmo2-tiny", "Olmo2ForCausalLM", olmoTiny},
	}
}()

// Rederive recomputes the fields of c that follow from its sizes, after a test shrinks a
// shape: Gemma's embedding scale sqrt(Dim) and attention scale 1/sqrt(HeadDim), as
// llama.cpp derives them from a GGUF's sizes.
func Rederive(c format.Config) format.Config {
	if c.Arch != "gemma2" && c.Arch != "gemma3" {
		return c // Granite's multipliers are the model's own
	}
	if c.EmbedScale > 0 {
		c.EmbedScale = math.Sqrt(float64(c.Dim))
	}
	if c.AttnScale > 0 {
		c.AttnScale = 1 / math.Sqrt(float64(c.HeadDim))
	}
	return c
}

// Lookup returns the built-in shape with the given name.
func Lookup(name string) (Shape, error) {
	s, ok := shapes[strings.ToLower(name)]
	if !ok {
		return Shape{}, fmt.Errorf("unknown shape %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names lists the built-in shapes.
func Names() []string {
	var names []string
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
