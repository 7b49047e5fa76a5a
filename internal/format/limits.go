package format

import (
	"fmt"
	"math"
)

// Limits bounds the counts a model's header may declare. Each is far above what any real
// model of the Llama family uses; they keep a hostile or corrupt header (a block_count of
// 2^62 in a 1 MB file) from making the loader loop or allocate per declared item before the
// tensors prove the count wrong. A zero field takes its DefaultLimits value.
type Limits struct {
	// MaxLayers bounds the transformer blocks (block_count, num_hidden_layers, n_layers).
	MaxLayers int
	// MaxHeads bounds the attention heads and the key/value heads.
	MaxHeads int
	// MaxHeadDim bounds the dimensions of one head (and so the rotary dimensions).
	MaxHeadDim int
	// MaxDim bounds the hidden (embedding) size.
	MaxDim int
	// MaxFFNDim bounds the feed-forward width of the dense MLP, of each expert and of the
	// shared expert.
	MaxFFNDim int
	// MaxVocab bounds the vocabulary size.
	MaxVocab int
	// MaxContextLen bounds the context length, the sliding window and the original context
	// of rotary scaling.
	MaxContextLen int
	// MaxExperts bounds the routed experts of a layer.
	MaxExperts int
}

// DefaultLimits are the limits Open applies when Options.Limits leaves a field zero.
var DefaultLimits = Limits{
	MaxLayers:     1024,
	MaxHeads:      1024,
	MaxHeadDim:    4096,
	MaxDim:        1 << 17,
	MaxFFNDim:     1 << 20,
	MaxVocab:      1 << 22,
	MaxContextLen: 1 << 27,
	MaxExperts:    4096,
}

// orDefault returns l with every zero (or negative) field set from DefaultLimits.
func (l Limits) orDefault() Limits {
	pick := func(v, def int) int {
		if v <= 0 {
			return def
		}
		return v
	}
	d := DefaultLimits
	return Limits{
		MaxLayers: pick(l.MaxLayers, d.MaxLayers), MaxHeads: pick(l.MaxHeads, d.MaxHeads),
		MaxHeadDim: pick(l.MaxHeadDim, d.MaxHeadDim), MaxDim: pick(l.MaxDim, d.MaxDim),
		MaxFFNDim: pick(l.MaxFFNDim, d.MaxFFNDim), MaxVocab: pick(l.MaxVocab, d.MaxVocab),
		MaxContextLen: pick(l.MaxContextLen, d.MaxContextLen), MaxExperts: pick(l.MaxExperts, d.MaxExperts),
	}
}

// fieldNames spells a Config's fields as the model's files name them, so that an error
// names the key to fix: "llama.block_count" in a GGUF, "num_hidden_layers" in a
// config.json, "n_layers" in a llama2.c header.
type fieldNames struct {
	vocab, dim, layers, heads, kvHeads, headDim, ropeDim, ffn, context, window, origContext string
	experts, expertsUsed, expertFFN, sharedFFN, normEps, ropeTheta                          string
}

// configNames names the fields as Config spells them (a model assembled in memory).
var configNames = fieldNames{
	vocab: "VocabSize", dim: "Dim", layers: "Layers", heads: "Heads", kvHeads: "KVHeads",
	headDim: "HeadDim", ropeDim: "RopeDim", ffn: "FFNDim", context: "ContextLen",
	window: "SlidingWindow", origContext: "Scaling.OriginalContextLen", experts: "Experts",
	expertsUsed: "ExpertsUsed", expertFFN: "ExpertFFNDim", sharedFFN: "SharedExpertFFN",
	normEps: "NormEps", ropeTheta: "RopeTheta",
}

// ggufNames names the fields by the "{arch}.*" metadata keys llama.cpp writes.
func ggufNames(arch string) fieldNames {
	k := func(s string) string { return arch + "." + s }
	return fieldNames{
		vocab: k("vocab_size"), dim: k("embedding_length"), layers: k("block_count"),
		heads: k("attention.head_count"), kvHeads: k("attention.head_count_kv"),
		headDim: k("attention.key_length"), ropeDim: k("rope.dimension_count"),
		ffn: k("feed_forward_length"), context: k("context_length"), window: k("attention.sliding_window"),
		origContext: k("rope.scaling.original_context_length"), experts: k("expert_count"),
		expertsUsed: k("expert_used_count"), expertFFN: k("expert_feed_forward_length"),
		sharedFFN: k("expert_shared_feed_forward_length"), normEps: k("attention.layer_norm_rms_epsilon"),
		ropeTheta: k("rope.freq_base"),
	}
}

// hfNames names the fields by their config.json keys; mixtral says whether the experts are
// Mixtral's (num_local_experts, intermediate_size) rather than Qwen2-MoE's.
func hfNames(mixtral bool) fieldNames {
	n := fieldNames{
		vocab: "vocab_size", dim: "hidden_size", layers: "num_hidden_layers", heads: "num_attention_heads",
		kvHeads: "num_key_value_heads", headDim: "head_dim", ropeDim: "head_dim", ffn: "intermediate_size",
		context: "max_position_embeddings", window: "sliding_window",
		origContext: "rope_scaling.original_max_position_embeddings", experts: "num_experts",
		expertsUsed: "num_experts_per_tok", expertFFN: "moe_intermediate_size",
		sharedFFN: "shared_expert_intermediate_size", normEps: "rms_norm_eps", ropeTheta: "rope_theta",
	}
	if mixtral {
		n.experts, n.expertFFN = "num_local_experts", "intermediate_size"
	}
	return n
}

// llama2cNames names the fields by the llama2.c header's values.
var llama2cNames = fieldNames{
	vocab: "vocab_size", dim: "dim", layers: "n_layers", heads: "n_heads", kvHeads: "n_kv_heads",
	headDim: "head size (dim / n_heads)", ropeDim: "head size (dim / n_heads)", ffn: "hidden_dim",
	context: "seq_len", window: "sliding window", origContext: "rope original context",
	experts: "experts", expertsUsed: "experts used", expertFFN: "expert hidden_dim",
	sharedFFN: "shared expert hidden_dim", normEps: "norm epsilon", ropeTheta: "rope theta",
}

// Validate checks that the hyperparameters describe a model kvasir can run, within
// DefaultLimits.
func (c *Config) Validate() error { return c.check(DefaultLimits, &configNames) }

// check validates c within limits l (zero fields: DefaultLimits), naming fields as n does.
// It looks at the numbers only; inferFromTensors then holds them against the tensors.
func (c *Config) check(l Limits, n *fieldNames) error {
	l = l.orDefault()
	type bound struct {
		name      string
		v, lo, hi int
		limit     string // the Limits field that sets hi, "" when hi is not a limit
	}
	bounds := []bound{
		{n.vocab, c.VocabSize, 1, l.MaxVocab, "MaxVocab"},
		{n.dim, c.Dim, 1, l.MaxDim, "MaxDim"},
		{n.layers, c.Layers, 1, l.MaxLayers, "MaxLayers"},
		{n.heads, c.Heads, 1, l.MaxHeads, "MaxHeads"},
		{n.kvHeads, c.KVHeads, 1, l.MaxHeads, "MaxHeads"},
		{n.headDim, c.HeadDim, 1, l.MaxHeadDim, "MaxHeadDim"},
		{n.ropeDim, c.RopeDim, 1, c.HeadDim, ""},
		{n.context, c.ContextLen, 0, l.MaxContextLen, "MaxContextLen"},
		{n.window, c.SlidingWindow, 0, l.MaxContextLen, "MaxContextLen"},
		{n.origContext, c.Scaling.OriginalContextLen, 0, l.MaxContextLen, "MaxContextLen"},
		{n.experts, c.Experts, 0, l.MaxExperts, "MaxExperts"},
	}
	if c.Experts == 0 {
		bounds = append(bounds, bound{n.ffn, c.FFNDim, 1, l.MaxFFNDim, "MaxFFNDim"})
	} else {
		bounds = append(bounds,
			bound{n.ffn, c.FFNDim, 0, l.MaxFFNDim, "MaxFFNDim"},
			bound{n.expertsUsed, c.ExpertsUsed, 1, c.Experts, ""},
			bound{n.expertFFN, c.ExpertFFNDim, 1, l.MaxFFNDim, "MaxFFNDim"},
			bound{n.sharedFFN, c.SharedExpertFFN, 0, l.MaxFFNDim, "MaxFFNDim"})
		if c.LeadingDenseLayers > 0 {
			bounds = append(bounds, bound{n.ffn, c.FFNDim, 1, l.MaxFFNDim, "MaxFFNDim"})
		}
	}
	if c.MLA() {
		bounds = append(bounds,
			bound{"q_lora_rank", c.QLoRARank, 0, l.MaxDim, "MaxDim"},
			bound{"qk_nope_head_dim", c.QKNopeDim, 1, l.MaxHeadDim, "MaxHeadDim"},
			bound{"v_head_dim", c.VHeadDim, 1, l.MaxHeadDim, "MaxHeadDim"},
			bound{"leading dense layers", c.LeadingDenseLayers, 0, c.Layers, ""})
	}
	for _, b := range bounds {
		switch {
		case b.v < b.lo:
			return fmt.Errorf("config: %s is %d; it must be at least %d", b.name, b.v, b.lo)
		case b.v > b.hi && b.limit != "":
			return fmt.Errorf("config: %s %d exceeds the limit of %d (format.Limits.%s)", b.name, b.v, b.hi, b.limit)
		case b.v > b.hi:
			return fmt.Errorf("config: %s %d is more than %d", b.name, b.v, b.hi)
		}
	}
	switch {
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("config: %s %d does not divide %s %d", n.kvHeads, c.KVHeads, n.heads, c.Heads)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("config: %s %d is odd; rotary embedding needs it even", n.headDim, c.HeadDim)
	case c.RopeDim%2 != 0:
		return fmt.Errorf("config: %s %d is odd; rotary embedding needs it even", n.ropeDim, c.RopeDim)
	case math.IsNaN(c.NormEps) || c.NormEps < 0 || c.NormEps >= 1:
		return fmt.Errorf("config: %s %v is out of range [0, 1)", n.normEps, c.NormEps)
	case !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0):
		return fmt.Errorf("config: %s %v must be positive and finite", n.ropeTheta, c.RopeTheta)
	}
	return nil
}
