package hfconfig

import (
	"errors"
	"fmt"
	"math"
)

// Validate checks that the hyperparameters describe a model kvasir can build.
func (c *Config) Validate() error {
	if _, ok := archs[c.Architecture]; !ok {
		return fmt.Errorf("unsupported architecture %q", c.Architecture)
	}
	positive := []struct {
		key string
		v   int
	}{
		{"vocab_size", c.VocabSize},
		{"hidden_size", c.HiddenSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
	}
	if !c.IsMoE() || c.Architecture == Mixtral {
		positive = append(positive, struct {
			key string
			v   int
		}{"intermediate_size", c.IntermediateSize})
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("%s is %d; it must be positive", p.key, p.v)
		}
		if p.v > math.MaxInt32 {
			return fmt.Errorf("%s %d is implausibly large", p.key, p.v)
		}
	}
	if c.IntermediateSize < 0 || c.IntermediateSize > math.MaxInt32 {
		return fmt.Errorf("intermediate_size %d is out of range", c.IntermediateSize)
	}
	// head_dim may differ from hidden/heads (Qwen3 sets it explicitly), but the heads must
	// still split the hidden size evenly, as in every model of these families.
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("num_attention_heads %d does not divide hidden_size %d", c.NumAttentionHeads, c.HiddenSize)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_key_value_heads %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d is odd; rotary embedding needs it even", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || c.RMSNormEps >= 1 {
		return fmt.Errorf("rms_norm_eps %v is out of range (0, 1)", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("rope_theta %v must be positive", c.RopeTheta)
	}
	if c.SlidingWindow < 0 {
		return fmt.Errorf("sliding_window %d is negative", c.SlidingWindow)
	}
	for _, id := range c.EOSTokenIDs {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("eos_token_id %d is outside the vocabulary of %d", id, c.VocabSize)
		}
	}
	for _, id := range c.BOSTokenID {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("bos_token_id %d is outside the vocabulary of %d", id, c.VocabSize)
		}
	}
	if c.IsMoE() {
		if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			return fmt.Errorf("num_experts_per_tok %d must be in 1..%d (the number of experts)", c.NumExpertsPerTok, c.NumExperts)
		}
		if c.MoEIntermediateSize <= 0 {
			return fmt.Errorf("moe_intermediate_size %d must be positive", c.MoEIntermediateSize)
		}
		if c.SharedExpertIntermediateSize < 0 {
			return fmt.Errorf("shared_expert_intermediate_size %d is negative", c.SharedExpertIntermediateSize)
		}
		if c.DecoderSparseStep <= 0 {
			return fmt.Errorf("decoder_sparse_step %d must be positive", c.DecoderSparseStep)
		}
	} else if c.NumExperts < 0 {
		return errors.New("number of experts is negative")
	}
	return nil
}
