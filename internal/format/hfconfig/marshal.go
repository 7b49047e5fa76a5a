package hfconfig

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Marshal returns config.json text that transformers loads as c's architecture. It
// validates c first. Keys that an architecture does not know are left out.
func (c *Config) Marshal() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("hfconfig: marshal: %w", err)
	}
	info := archs[c.Architecture]
	dtype := c.TorchDType
	if dtype == "" {
		dtype = "float32"
	}
	m := map[string]any{
		"architectures":           []string{c.Architecture},
		"model_type":              info.modelType,
		"torch_dtype":             dtype,
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumHiddenLayers,
		"num_attention_heads":     c.NumAttentionHeads,
		"num_key_value_heads":     c.NumKeyValueHeads,
		"head_dim":                c.HeadDim,
		"max_position_embeddings": c.MaxPositionEmbeddings,
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"rope_scaling":            nil,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"hidden_act":              "silu",
		"initializer_range":       0.02,
		"attention_dropout":       jsonFloat(0),
		"use_cache":               true,
		"bos_token_id":            c.BOSTokenID,
		"eos_token_id":            c.EOSTokenIDs,
	}
	if c.RopeScaling != nil {
		m["rope_scaling"] = c.RopeScaling.toJSON()
	}
	switch c.Architecture {
	case Llama:
		m["attention_bias"] = c.AttentionBias
		m["mlp_bias"] = false
		m["pretraining_tp"] = 1
	case Qwen3:
		m["attention_bias"] = c.AttentionBias
	}
	if info.qwenWindowKeys {
		m["use_sliding_window"] = c.UseSlidingWindow
		m["sliding_window"] = nil
		if c.SlidingWindow > 0 {
			m["sliding_window"] = c.SlidingWindow
		}
		mwl := c.MaxWindowLayers
		if mwl == 0 {
			mwl = c.NumHiddenLayers
		}
		m["max_window_layers"] = mwl
	} else if c.Architecture == Mistral || c.Architecture == Mixtral || c.Architecture == Phi3 {
		m["sliding_window"] = nil // null: no window (an absent key would mean 4096 for Mistral)
		if c.SlidingWindow > 0 {
			m["sliding_window"] = c.SlidingWindow
		}
	}
	if info.gemma {
		c.marshalGemma(m)
	}
	if c.Architecture == Granite {
		g := c.Granite
		m["embedding_multiplier"], m["residual_multiplier"] = g.EmbeddingMultiplier, g.ResidualMultiplier
		m["attention_multiplier"], m["logits_scaling"] = g.AttentionMultiplier, g.LogitsScaling
		m["attention_bias"], m["mlp_bias"] = false, false
	}
	if c.Architecture == Olmo2 {
		m["attention_bias"] = false
	}
	if c.Architecture == DeepSeekV2 || c.Architecture == DeepSeekV3 {
		c.marshalDeepSeek(m)
	}
	if c.Architecture == Phi3 {
		m["original_max_position_embeddings"] = c.MaxPositionEmbeddings
		m["attention_bias"] = false
		m["resid_pdrop"], m["embd_pdrop"] = jsonFloat(0), jsonFloat(0)
		m["pad_token_id"] = 0 // transformers' default, 32000, lies outside a small vocabulary
	}
	switch c.Architecture {
	case Mixtral:
		m["num_local_experts"] = c.NumExperts
		m["num_experts_per_tok"] = c.NumExpertsPerTok
		m["router_aux_loss_coef"] = 0.02
		m["output_router_logits"] = false
	case Qwen2MoE, Qwen3MoE:
		m["num_experts"] = c.NumExperts
		m["num_experts_per_tok"] = c.NumExpertsPerTok
		m["moe_intermediate_size"] = c.MoEIntermediateSize
		if c.Architecture == Qwen2MoE {
			m["shared_expert_intermediate_size"] = c.SharedExpertIntermediateSize
		} else {
			m["attention_bias"] = c.AttentionBias
		}
		m["norm_topk_prob"] = c.NormTopKProb
		step := c.DecoderSparseStep
		if step == 0 {
			step = 1
		}
		m["decoder_sparse_step"] = step
		layers := c.MLPOnlyLayers
		if layers == nil {
			layers = []int{}
		}
		m["mlp_only_layers"] = layers
		m["router_aux_loss_coef"] = 0.001
		m["output_router_logits"] = false
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("hfconfig: marshal: %w", err)
	}
	return append(data, '\n'), nil
}

// NewConfig returns a Config for arch with the given sizes and transformers' defaults for
// everything else, ready to adjust and Marshal. It does not validate.
func NewConfig(arch string, vocab, hidden, intermediate, layers, heads, kvHeads int) (*Config, error) {
	info, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("hfconfig: unsupported architecture %q", arch)
	}
	c := &Config{
		Architecture:                 arch,
		Architectures:                []string{arch},
		ModelType:                    info.modelType,
		VocabSize:                    vocab,
		HiddenSize:                   hidden,
		IntermediateSize:             intermediate,
		NumHiddenLayers:              layers,
		NumAttentionHeads:            heads,
		NumKeyValueHeads:             kvHeads,
		MaxPositionEmbeddings:        info.maxPos,
		RMSNormEps:                   info.rmsNormEps,
		RopeTheta:                    info.ropeTheta,
		NumExperts:                   info.experts,
		NumExpertsPerTok:             info.expertsPerTok,
		MoEIntermediateSize:          info.moeFFN,
		SharedExpertIntermediateSize: info.sharedFFN,
	}
	if heads > 0 {
		c.HeadDim = hidden / heads
	}
	if info.bosID >= 0 && info.bosID < vocab {
		c.BOSTokenID = TokenIDs{info.bosID}
	}
	if info.eosID >= 0 && info.eosID < vocab {
		c.EOSTokenIDs = TokenIDs{info.eosID}
	}
	if arch == Mixtral {
		c.MoEIntermediateSize = intermediate
		c.NormTopKProb = true
	}
	if info.experts > 0 {
		c.DecoderSparseStep = 1
	}
	if info.qwenWindowKeys {
		c.MaxWindowLayers = layers
	}
	if arch == Granite {
		c.Granite = GraniteConfig{EmbeddingMultiplier: 1, ResidualMultiplier: 1, AttentionMultiplier: 1, LogitsScaling: 1}
	}
	if arch == DeepSeekV2 || arch == DeepSeekV3 {
		c.DeepSeek = DeepSeekConfig{KVLoRARank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128,
			RoutedScalingFactor: 1, TopKMethod: "greedy", NGroup: 1, TopKGroup: 1}
		if arch == DeepSeekV3 {
			c.DeepSeek.TopKMethod, c.DeepSeek.ScoringFunc = "noaux_tc", "sigmoid"
		}
		c.HeadDim = 128 + 64
	}
	if info.gemma {
		c.TieWordEmbeddings = true
		c.SlidingWindow, c.UseSlidingWindow = info.slidingWindow, true
		c.Gemma = defaultGemma(arch, layers)
	}
	return c, nil
}

// marshalDeepSeek sets DeepseekV2ForCausalLM's keys: the MLA head sizes and ranks in
// place of head_dim (which transformers would take for the rotary size), and the mixture
// of experts (greedy top-k over softmax scores; one expert group, so group-limited
// routing, where a version applies it, chooses the same).
func (c *Config) marshalDeepSeek(m map[string]any) {
	d := c.DeepSeek
	delete(m, "head_dim")
	var qRank any
	if d.QLoRARank > 0 {
		qRank = d.QLoRARank
	}
	m["q_lora_rank"], m["kv_lora_rank"] = qRank, d.KVLoRARank
	m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"] = d.QKNopeHeadDim, d.QKRopeHeadDim, d.VHeadDim
	m["attention_bias"], m["mlp_bias"] = false, false
	m["n_routed_experts"], m["num_experts_per_tok"] = c.NumExperts, c.NumExpertsPerTok
	m["moe_intermediate_size"], m["n_shared_experts"] = c.MoEIntermediateSize, d.NSharedExperts
	m["first_k_dense_replace"], m["routed_scaling_factor"] = d.FirstKDenseReplace, jsonFloat(d.RoutedScalingFactor)
	m["norm_topk_prob"], m["topk_method"], m["n_group"], m["topk_group"] = c.NormTopKProb, "greedy", 1, 1
	m["moe_layer_freq"], m["aux_loss_alpha"], m["seq_aux"] = 1, 0.001, true
	if c.Architecture == DeepSeekV3 {
		m["topk_method"], m["scoring_func"], m["n_group"], m["topk_group"] = "noaux_tc", "sigmoid", max(d.NGroup, 1), max(d.TopKGroup, 1)
		m["rope_interleave"] = true
		delete(m, "moe_layer_freq")
		delete(m, "aux_loss_alpha")
		delete(m, "seq_aux")
	}
}

// jsonFloat is a float that JSON always writes with a fraction or an exponent (0.0, not 0):
// transformers' strict configs refuse an integer where the field's type is float.
type jsonFloat float64

// MarshalJSON writes f as a JSON number that reads back as a float.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(float64(f), 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return []byte(s), nil
}
