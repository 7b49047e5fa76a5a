// Package hfconfig reads and writes the JSON files of a Hugging Face model folder that
// describe the model rather than its weights or vocabulary: config.json (hyperparameters of
// the Llama-family architectures kvasir runs), generation_config.json (default sampling
// settings) and the parts of tokenizer_config.json that matter outside the tokenizer (chat
// template, special token strings, BOS/EOS insertion).
package hfconfig

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// Architecture names (the "architectures" entry) this package supports, with their
// model_type.
const (
	Llama    = "LlamaForCausalLM"
	Mistral  = "MistralForCausalLM"
	Qwen2    = "Qwen2ForCausalLM"
	Qwen3    = "Qwen3ForCausalLM"
	Mixtral  = "MixtralForCausalLM"
	Qwen2MoE = "Qwen2MoeForCausalLM"
	Qwen3MoE = "Qwen3MoeForCausalLM"
	Gemma2   = "Gemma2ForCausalLM"
	Gemma3   = "Gemma3ForCausalLM" // the text-only model (model_type gemma3_text)
	Phi3     = "Phi3ForCausalLM"
	Granite  = "GraniteForCausalLM"
	Olmo2    = "Olmo2ForCausalLM"
	// DeepSeekV2 is DeepSeek-V2 (multi-head latent attention; see DeepSeekConfig).
	DeepSeekV2 = "DeepseekV2ForCausalLM"
	// DeepSeekV3 is DeepSeek-V3 (DeepSeek-V2's attention; sigmoid, group-limited routing).
	DeepSeekV3 = "DeepseekV3ForCausalLM"
)

// archInfo holds an architecture's model_type and the defaults transformers applies when a
// key is absent from config.json.
type archInfo struct {
	modelType      string
	kvHeads        int // 0: same as num_attention_heads
	headDim        int // 0: hidden_size / num_attention_heads
	maxPos         int
	rmsNormEps     float64
	ropeTheta      float64
	slidingWindow  int // Mistral's default window; 0 for none
	experts        int
	expertsPerTok  int
	moeFFN         int
	sharedFFN      int
	bosID, eosID   int // -1 for none
	qkvBias        bool
	qkNorm         bool
	qwenWindowKeys bool // use_sliding_window / max_window_layers keys
	tied           bool // tie_word_embeddings defaults to true
	gemma          bool // Gemma's keys (see gemma.go)
}

var archs = map[string]archInfo{
	Llama:      {modelType: "llama", maxPos: 2048, rmsNormEps: 1e-6, ropeTheta: 10000, bosID: 1, eosID: 2},
	Mistral:    {modelType: "mistral", kvHeads: 8, maxPos: 4096 * 32, rmsNormEps: 1e-6, ropeTheta: 10000, slidingWindow: 4096, bosID: 1, eosID: 2},
	Qwen2:      {modelType: "qwen2", maxPos: 32768, rmsNormEps: 1e-6, ropeTheta: 10000, bosID: -1, eosID: -1, qkvBias: true, qwenWindowKeys: true},
	Qwen3:      {modelType: "qwen3", headDim: 128, maxPos: 32768, rmsNormEps: 1e-6, ropeTheta: 10000, bosID: -1, eosID: -1, qkNorm: true, qwenWindowKeys: true},
	Mixtral:    {modelType: "mixtral", kvHeads: 8, maxPos: 4096 * 32, rmsNormEps: 1e-5, ropeTheta: 1e6, experts: 8, expertsPerTok: 2, bosID: 1, eosID: 2},
	Qwen3MoE:   {modelType: "qwen3_moe", headDim: 128, maxPos: 32768, rmsNormEps: 1e-6, ropeTheta: 10000, experts: 128, expertsPerTok: 8, moeFFN: 768, bosID: -1, eosID: -1, qkNorm: true, qwenWindowKeys: true},
	Qwen2MoE:   {modelType: "qwen2_moe", maxPos: 32768, rmsNormEps: 1e-6, ropeTheta: 10000, experts: 60, expertsPerTok: 4, moeFFN: 1408, sharedFFN: 5632, bosID: -1, eosID: -1, qkvBias: true, qwenWindowKeys: true},
	Gemma2:     {modelType: "gemma2", kvHeads: 4, headDim: 256, maxPos: 8192, rmsNormEps: 1e-6, ropeTheta: 10000, slidingWindow: 4096, bosID: 2, eosID: 1, tied: true, gemma: true},
	Olmo2:      {modelType: "olmo2", maxPos: 2048, rmsNormEps: 1e-5, ropeTheta: 10000, bosID: -1, eosID: 50279, qkNorm: true},
	Granite:    {modelType: "granite", maxPos: 2048, rmsNormEps: 1e-6, ropeTheta: 10000, bosID: 1, eosID: 2},
	Phi3:       {modelType: "phi3", maxPos: 4096, rmsNormEps: 1e-5, ropeTheta: 10000, bosID: 1, eosID: 32000},
	DeepSeekV3: {modelType: "deepseek_v3", maxPos: 4096, rmsNormEps: 1e-6, ropeTheta: 10000, experts: 256, expertsPerTok: 8, moeFFN: 2048, bosID: -1, eosID: -1},
	DeepSeekV2: {modelType: "deepseek_v2", maxPos: 2048, rmsNormEps: 1e-6, ropeTheta: 10000, experts: 64, expertsPerTok: 6, moeFFN: 1407, bosID: -1, eosID: -1},
	Gemma3:     {modelType: "gemma3_text", kvHeads: 4, headDim: 256, maxPos: 131072, rmsNormEps: 1e-6, ropeTheta: 1e6, slidingWindow: 4096, bosID: 2, eosID: 1, tied: true, qkNorm: true, gemma: true},
}

// Config is a parsed config.json of a supported architecture, with transformers' defaults
// filled in for absent keys.
type Config struct {
	// Architecture is the supported entry of "architectures", such as "LlamaForCausalLM".
	Architecture string
	// Architectures is the "architectures" list as written.
	Architectures []string
	ModelType     string
	TorchDType    string // "bfloat16", "float16", "float32" or "" when absent

	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	// RopeScaling is nil when the model uses plain rotary embedding.
	RopeScaling *RopeScaling

	TieWordEmbeddings bool
	// AttentionBias is the "attention_bias" key: biases on the q, k, v and o projections of
	// Llama, Mistral and Qwen3. Qwen2 has q, k and v biases regardless (see QKVBias).
	AttentionBias bool
	// SlidingWindow is the attention window in tokens when windowed attention is in force,
	// 0 otherwise (Qwen models window only when use_sliding_window is true).
	SlidingWindow    int
	UseSlidingWindow bool
	// MaxWindowLayers is Qwen's max_window_layers: layers from this index on use the window.
	MaxWindowLayers int

	BOSTokenID  TokenIDs
	EOSTokenIDs TokenIDs

	// Mixture of experts (Mixtral's num_local_experts, Qwen2-MoE's num_experts); 0 for a
	// dense model.
	NumExperts                   int
	NumExpertsPerTok             int
	MoEIntermediateSize          int // Qwen2-MoE routed expert width; Mixtral uses IntermediateSize
	SharedExpertIntermediateSize int // Qwen2-MoE shared expert width
	NormTopKProb                 bool
	DecoderSparseStep            int   // Qwen2-MoE: every this many layers is sparse (1: all)
	MLPOnlyLayers                []int // Qwen2-MoE: layers kept dense

	// Gemma 2 and 3 (see gemma.go); zero for the other architectures.
	Gemma GemmaConfig
	// Granite's multipliers; zero for the other architectures.
	Granite GraniteConfig
	// DeepSeek holds DeepSeek-V2's fields (with HeadDim qk_nope_head_dim +
	// qk_rope_head_dim and NumExperts n_routed_experts); zero for the other architectures.
	DeepSeek DeepSeekConfig
}

// DeepSeekConfig holds the config.json fields of multi-head latent attention and of
// DeepSeek's mixture of experts.
type DeepSeekConfig struct {
	QLoRARank, KVLoRARank                  int // q_lora_rank (0 for null), kv_lora_rank
	QKNopeHeadDim, QKRopeHeadDim, VHeadDim int
	FirstKDenseReplace, NSharedExperts     int
	RoutedScalingFactor                    float64
	TopKMethod, ScoringFunc                string
	NGroup, TopKGroup                      int // expert groups, and those a token's experts come from
}

// GraniteConfig holds Granite's multipliers (transformers' default for each is 1).
type GraniteConfig struct {
	EmbeddingMultiplier, ResidualMultiplier, AttentionMultiplier, LogitsScaling float64
}

// QKVBias reports whether the q, k and v projections have biases.
func (c *Config) QKVBias() bool { return archs[c.Architecture].qkvBias || c.AttentionBias }

// OutputBias reports whether the attention output projection has a bias.
func (c *Config) OutputBias() bool { return c.AttentionBias && !archs[c.Architecture].qkvBias }

// QKNorm reports whether q and k are RMS-normalized per head before rotary embedding
// (Qwen3).
func (c *Config) QKNorm() bool { return archs[c.Architecture].qkNorm }

// IsMoE reports whether the model routes tokens to experts.
func (c *Config) IsMoE() bool { return c.NumExperts > 0 }

// configJSON is config.json as written on disk; pointers tell absent keys apart.
type configJSON struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype"` // transformers 5 renamed torch_dtype
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	SlidingWindow         json.RawMessage `json:"sliding_window"` // absent, null or a number
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	MaxWindowLayers       *int            `json:"max_window_layers"`
	BOSTokenID            *TokenIDs       `json:"bos_token_id"`
	EOSTokenID            *TokenIDs       `json:"eos_token_id"`
	NumLocalExperts       *int            `json:"num_local_experts"`
	NumExperts            *int            `json:"num_experts"`
	NumExpertsPerTok      *int            `json:"num_experts_per_tok"`
	MoEIntermediateSize   *int            `json:"moe_intermediate_size"`
	SharedExpertFFN       *int            `json:"shared_expert_intermediate_size"`
	NormTopKProb          *bool           `json:"norm_topk_prob"`
	DecoderSparseStep     *int            `json:"decoder_sparse_step"`
	MLPOnlyLayers         []int           `json:"mlp_only_layers"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	EmbeddingMultiplier   *float64        `json:"embedding_multiplier"`
	ResidualMultiplier    *float64        `json:"residual_multiplier"`
	AttentionMultiplier   *float64        `json:"attention_multiplier"`
	LogitsScaling         *float64        `json:"logits_scaling"`
	KVLoRARank            *int            `json:"kv_lora_rank"`
	QLoRARank             *int            `json:"q_lora_rank"`
	QKNopeHeadDim         *int            `json:"qk_nope_head_dim"`
	QKRopeHeadDim         *int            `json:"qk_rope_head_dim"`
	VHeadDim              *int            `json:"v_head_dim"`
	FirstKDenseReplace    *int            `json:"first_k_dense_replace"`
	NSharedExperts        *int            `json:"n_shared_experts"`
	NRoutedExperts        *int            `json:"n_routed_experts"`
	RoutedScalingFactor   *float64        `json:"routed_scaling_factor"`
	TopKMethod            *string         `json:"topk_method"`
	ScoringFunc           *string         `json:"scoring_func"`
	MoELayerFreq          *int            `json:"moe_layer_freq"`
	NGroup                *int            `json:"n_group"`
	TopKGroup             *int            `json:"topk_group"`
	gemmaJSON
}

// ReadConfig reads and parses the config.json at path.
func ReadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hfconfig: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("hfconfig %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a config.json, fills in transformers' defaults and validates the result.
func ParseConfig(data []byte) (*Config, error) {
	var j configJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	arch, err := pickArch(j.Architectures, j.ModelType)
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	info := archs[arch]
	c := &Config{
		Architecture:  arch,
		Architectures: j.Architectures,
		ModelType:     info.modelType,
		TorchDType:    j.TorchDType,
	}
	if len(j.MLPOnlyLayers) > 0 {
		c.MLPOnlyLayers = j.MLPOnlyLayers
	}
	if c.TorchDType == "" {
		c.TorchDType = j.DType
	}
	// The sizes that define the weights have no sensible default: require them.
	required := []struct {
		key string
		src *int
		dst *int
	}{
		{"vocab_size", j.VocabSize, &c.VocabSize},
		{"hidden_size", j.HiddenSize, &c.HiddenSize},
		{"intermediate_size", j.IntermediateSize, &c.IntermediateSize},
		{"num_hidden_layers", j.NumHiddenLayers, &c.NumHiddenLayers},
		{"num_attention_heads", j.NumAttentionHeads, &c.NumAttentionHeads},
	}
	for _, r := range required {
		if r.src == nil {
			if r.key == "intermediate_size" && (arch == Qwen2MoE || arch == Qwen3MoE) && j.MoEIntermediateSize != nil {
				continue // a Qwen2-MoE with every layer sparse needs no dense width
			}
			return nil, fmt.Errorf("config.json: %s missing", r.key)
		}
		*r.dst = *r.src
	}
	switch {
	case j.NumKeyValueHeads != nil:
		c.NumKeyValueHeads = *j.NumKeyValueHeads
	case info.kvHeads > 0:
		c.NumKeyValueHeads = info.kvHeads
	default:
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	c.HeadDim = orInt(j.HeadDim, info.headDim)
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.MaxPositionEmbeddings = orInt(j.MaxPositionEmbeddings, info.maxPos)
	c.RMSNormEps = orFloat(j.RMSNormEps, info.rmsNormEps)
	c.RopeTheta = orFloat(j.RopeTheta, info.ropeTheta)
	c.TieWordEmbeddings = orBool(j.TieWordEmbeddings, info.tied)
	c.AttentionBias = orBool(j.AttentionBias, false)
	if arch == Qwen2 || arch == Qwen2MoE || arch == Mixtral {
		c.AttentionBias = false // these models ignore the key; Qwen2's q/k/v bias is implicit
	}

	ropeRaw := j.RopeScaling
	if len(ropeRaw) == 0 || string(ropeRaw) == "null" {
		ropeRaw = j.RopeParameters // transformers 5 moved rope settings here
	}
	scaling, theta, err := parseRope(ropeRaw, c.MaxPositionEmbeddings)
	if err != nil {
		return nil, fmt.Errorf("config.json: rope_scaling: %w", err)
	}
	c.RopeScaling = scaling
	if theta != nil && j.RopeTheta == nil {
		c.RopeTheta = *theta
	}

	window := info.slidingWindow
	if len(j.SlidingWindow) > 0 {
		var w *int
		if err := json.Unmarshal(j.SlidingWindow, &w); err != nil {
			return nil, fmt.Errorf("config.json: sliding_window: %w", err)
		}
		window = orInt(w, 0) // null turns the window off
	}
	if info.qwenWindowKeys {
		c.UseSlidingWindow = orBool(j.UseSlidingWindow, false)
		c.MaxWindowLayers = orInt(j.MaxWindowLayers, c.NumHiddenLayers)
		if !c.UseSlidingWindow {
			window = 0
		}
	} else {
		c.UseSlidingWindow = window > 0
	}
	c.SlidingWindow = window

	// A default outside the vocabulary (Phi-3's 32000 in a small synthesized model) is no
	// default; an id the file gives is held to the vocabulary by Validate.
	c.BOSTokenID = orIDs(j.BOSTokenID, inVocab(info.bosID, c.VocabSize))
	c.EOSTokenIDs = orIDs(j.EOSTokenID, inVocab(info.eosID, c.VocabSize))

	if info.experts > 0 {
		experts := j.NumLocalExperts
		switch arch {
		case Qwen2MoE, Qwen3MoE:
			experts = j.NumExperts
		case DeepSeekV2, DeepSeekV3:
			experts = j.NRoutedExperts
		}
		c.NumExperts = orInt(experts, info.experts)
		c.NumExpertsPerTok = orInt(j.NumExpertsPerTok, info.expertsPerTok)
		c.MoEIntermediateSize = orInt(j.MoEIntermediateSize, info.moeFFN)
		c.SharedExpertIntermediateSize = orInt(j.SharedExpertFFN, info.sharedFFN)
		c.NormTopKProb = orBool(j.NormTopKProb, arch == Mixtral) // Mixtral always renormalizes
		if arch == Mixtral {
			c.NormTopKProb = true
			c.MoEIntermediateSize = c.IntermediateSize
		}
		c.DecoderSparseStep = orInt(j.DecoderSparseStep, 1)
	}
	if f := j.PartialRotaryFactor; f != nil && *f != 1 {
		return nil, fmt.Errorf("config.json: partial_rotary_factor %v is not supported (only 1)", *f)
	}
	if arch == DeepSeekV2 || arch == DeepSeekV3 {
		if f := orInt(j.MoELayerFreq, 1); f != 1 {
			return nil, fmt.Errorf("config.json: moe_layer_freq %d is not supported (only 1)", f)
		}
		str := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		c.DeepSeek = DeepSeekConfig{
			QLoRARank: orInt(j.QLoRARank, 0), KVLoRARank: orInt(j.KVLoRARank, 512),
			QKNopeHeadDim: orInt(j.QKNopeHeadDim, 128), QKRopeHeadDim: orInt(j.QKRopeHeadDim, 64),
			VHeadDim: orInt(j.VHeadDim, 128), FirstKDenseReplace: orInt(j.FirstKDenseReplace, 0),
			NSharedExperts: orInt(j.NSharedExperts, 0), RoutedScalingFactor: orFloat(j.RoutedScalingFactor, 1),
			TopKMethod: str(j.TopKMethod), ScoringFunc: str(j.ScoringFunc),
			NGroup: orInt(j.NGroup, 1), TopKGroup: orInt(j.TopKGroup, 1),
		}
		if arch == DeepSeekV3 {
			// transformers' DeepseekV3 always routes by sigmoid, group-limited.
			c.DeepSeek.ScoringFunc, c.DeepSeek.TopKMethod = "sigmoid", "noaux_tc"
		}
		c.HeadDim = c.DeepSeek.QKNopeHeadDim + c.DeepSeek.QKRopeHeadDim
	}
	if arch == Granite {
		c.Granite = GraniteConfig{EmbeddingMultiplier: orFloat(j.EmbeddingMultiplier, 1), ResidualMultiplier: orFloat(j.ResidualMultiplier, 1),
			AttentionMultiplier: orFloat(j.AttentionMultiplier, 1), LogitsScaling: orFloat(j.LogitsScaling, 1)}
		for key, v := range map[string]float64{"embedding_multiplier": c.Granite.EmbeddingMultiplier, "residual_multiplier": c.Granite.ResidualMultiplier,
			"attention_multiplier": c.Granite.AttentionMultiplier, "logits_scaling": c.Granite.LogitsScaling} {
			if !(v > 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("config.json: %s %v must be positive and finite", key, v)
			}
		}
	}
	if info.gemma {
		if err := c.parseGemma(&j.gemmaJSON); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// pickArch chooses the supported architecture from the architectures list, or from the
// model_type when the list is absent.
func pickArch(list []string, modelType string) (string, error) {
	if len(list) == 0 {
		for name, info := range archs {
			if info.modelType == modelType {
				return name, nil
			}
		}
		if modelType == "" {
			return "", fmt.Errorf("neither architectures nor model_type given")
		}
		return "", fmt.Errorf("unsupported model_type %q", modelType)
	}
	for _, a := range list {
		info, ok := archs[a]
		if !ok {
			continue
		}
		if modelType != "" && modelType != info.modelType {
			return "", fmt.Errorf("architecture %s does not match model_type %q (want %q)", a, modelType, info.modelType)
		}
		return a, nil
	}
	return "", fmt.Errorf("unsupported architecture %q (supported: %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
		list[0], Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2MoE, Qwen3MoE, Gemma2, Gemma3, Phi3, Granite, Olmo2, DeepSeekV2, DeepSeekV3)
}

func orInt(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func orFloat(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

func orBool(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func orIDs(p *TokenIDs, def int) TokenIDs {
	if p != nil {
		return *p
	}
	if def < 0 {
		return nil
	}
	return TokenIDs{def}
}

// inVocab returns id when it lies in a vocabulary of vocab tokens, else -1 (none).
func inVocab(id, vocab int) int {
	if id >= vocab {
		return -1
	}
	return id
}
