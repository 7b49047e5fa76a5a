package format

import (
	"math"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
)

// IBM's Granite 3 is a Llama block with four multipliers: the embeddings
// (embedding_multiplier), each half-block's output before it joins the residual stream
// (residual_multiplier), the attention scores in place of 1/sqrt(head size)
// (attention_multiplier), and the logits, divided by logits_scaling. llama.cpp's GGUF
// keeps them as granite.embedding_scale, residual_scale, attention.scale and logit_scale
// (the divisor), and lays q/k rows out as for "llama" (interleaved rotary pairs).

// granite returns how a Config spells Granite's multipliers from the four values as the
// files give them (0 for an absent one).
func granite(c *Config, embedding, residual, attention, logitsScaling float64) {
	c.EmbedScale, c.ResidualScale, c.AttnScale = embedding, residual, attention
	if logitsScaling > 0 {
		c.LogitScale = 1 / logitsScaling
	}
}

// graniteFromGGUF reads Granite's multipliers.
func graniteFromGGUF(f *gguf.File, c *Config) {
	get := func(key string) float64 {
		v, _ := f.GetFloat64(c.Arch + "." + key)
		return v
	}
	granite(c, get("embedding_scale"), get("residual_scale"), get("attention.scale"), get("logit_scale"))
}

// graniteGGUFMetadata returns Granite's keys for GGUFMetadata.
func graniteGGUFMetadata(c Config) []gguf.KV {
	f := func(key string, v float64) gguf.KV {
		return gguf.KV{Key: c.Arch + "." + key, Value: gguf.Float32(float32(v))}
	}
	logitScale := 1.0
	if c.LogitScale > 0 {
		logitScale = 1 / c.LogitScale
	}
	return []gguf.KV{f("embedding_scale", orOne(c.EmbedScale)), f("residual_scale", orOne(c.ResidualScale)),
		f("attention.scale", attnScaleOf(c)), f("logit_scale", logitScale)}
}

// orOne returns v, or 1 for 0 (a multiplier not set).
func orOne(v float64) float64 {
	if v == 0 {
		return 1
	}
	return v
}

// attnScaleOf returns c's attention scores' scale: AttnScale, else 1/sqrt(HeadDim).
func attnScaleOf(c Config) float64 {
	if c.AttnScale > 0 {
		return c.AttnScale
	}
	return 1 / math.Sqrt(float64(c.HeadDim))
}

// graniteFromHF reads Granite's multipliers from config.json.
func graniteFromHF(h *hfconfig.Config, c *Config) {
	g := h.Granite
	granite(c, g.EmbeddingMultiplier, g.ResidualMultiplier, g.AttentionMultiplier, g.LogitsScaling)
}

// graniteToHF sets config.json's multipliers from c.
func graniteToHF(c Config, h *hfconfig.Config) {
	logitsScaling := 1.0
	if c.LogitScale > 0 {
		logitsScaling = 1 / c.LogitScale
	}
	h.Granite = hfconfig.GraniteConfig{EmbeddingMultiplier: orOne(c.EmbedScale), ResidualMultiplier: orOne(c.ResidualScale),
		AttentionMultiplier: attnScaleOf(c), LogitsScaling: logitsScaling}
}
