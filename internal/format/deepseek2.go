package format

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// DeepSeek-V2 (llama.cpp's "deepseek2") replaces the Llama block's attention by
// multi-head latent attention (MLA) and its MLP, after a few leading dense layers, by a
// mixture of routed experts with always-on shared experts added ungated:
//
//	q      = q_b · RMSNorm(q_a · x)            (or attn_q · x without a q rank)
//	         head h: [QKNopeDim q_nope | RopeDim q_rope]
//	ckv|kr = kv_a_mqa · x                      [KVLoRARank latent | RopeDim rope key]
//	c      = RMSNorm(ckv) by kv_a_norm
//	kv     = kv_b · c                          head h: [QKNopeDim k_nope | VHeadDim v]
//	k_h    = [k_nope_h | rope(kr)], q_h = [q_nope_h | rope(q_rope_h)]
//
// The rotary pairs are interleaved ((2i, 2i+1)) in both llama.cpp's files and Hugging
// Face's checkpoints, so neither is permuted. The Config describes the cache kvasir keeps
// (see Config.MLA): one vector a token of RopeDim + KVLoRARank, so HeadDim and KVHeads
// are not the file's key_length and head_count_kv, which this file translates.
// DeepSeek's YaRN (its mscale and mscale_all_dim) is read from either file; files made
// for llama.cpp's MLA cache, with attn_kv_b split into attn_k_b and attn_v_b, have it
// joined again on load (joinKVB). V3's sigmoid routing with expert bias and
// group-limited routing are refused with an error naming them.

// deepseek2HFLayerNames are the MLA and shared-expert tensors' Hugging Face names.
var deepseek2HFLayerNames = map[string]string{
	"self_attn.q_a_proj.weight":           "attn_q_a.weight",
	"self_attn.q_a_layernorm.weight":      "attn_q_a_norm.weight",
	"self_attn.q_b_proj.weight":           "attn_q_b.weight",
	"self_attn.q_proj.weight":             "attn_q.weight",
	"self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
	"self_attn.kv_a_layernorm.weight":     "attn_kv_a_norm.weight",
	"self_attn.kv_b_proj.weight":          "attn_kv_b.weight",
	"self_attn.o_proj.weight":             "attn_output.weight",
	"mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
	"mlp.shared_experts.up_proj.weight":   "ffn_up_shexp.weight",
	"mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
	"mlp.gate.e_score_correction_bias":    "exp_probs_b.bias",
}

// mlaFromFile completes c from the sizes as the files give them: the head's key size
// (nope + rope) and value size, and the ranks. It sets the cache geometry (HeadDim,
// KVHeads) and the attention scale.
func mlaFromFile(c *Config, keyLen, valueLen int) error {
	switch {
	case c.KVLoRARank <= 0:
		return fmt.Errorf("deepseek2: kv_lora_rank is %d; it must be positive", c.KVLoRARank)
	case c.RopeDim <= 0 || c.RopeDim%2 != 0:
		return fmt.Errorf("deepseek2: the rotary head size (qk_rope_head_dim) %d must be positive and even", c.RopeDim)
	case keyLen <= c.RopeDim:
		return fmt.Errorf("deepseek2: the key head size %d must exceed the rotary head size %d", keyLen, c.RopeDim)
	case valueLen <= 0:
		return fmt.Errorf("deepseek2: the value head size %d must be positive", valueLen)
	case c.QLoRARank < 0:
		return fmt.Errorf("deepseek2: q_lora_rank %d is negative", c.QLoRARank)
	case c.Scaling.Type != "" && c.Scaling.Type != "yarn":
		return fmt.Errorf("deepseek2: %s rope scaling is not supported (only YaRN or none)", c.Scaling.Type)
	case c.LeadingDenseLayers < 0 || c.LeadingDenseLayers > c.Layers:
		return fmt.Errorf("deepseek2: %d leading dense layers of %d", c.LeadingDenseLayers, c.Layers)
	case math.IsNaN(c.ExpertScale) || math.IsInf(c.ExpertScale, 0) || c.ExpertScale < 0:
		return fmt.Errorf("deepseek2: routed_scaling_factor %v must be finite and positive", c.ExpertScale)
	}
	if g := c.ExpertGroups; g > 1 {
		// Each group is scored by its two best experts; the groups used must hold the
		// experts a token takes.
		if c.Experts%g != 0 || c.Experts/g < 2 || c.ExpertGroupsUsed < 1 || c.ExpertGroupsUsed > g ||
			c.ExpertGroupsUsed*(c.Experts/g) < c.ExpertsUsed {
			return fmt.Errorf("deepseek2: %d experts (%d a token) in %d groups of which %d are used: want groups of at least 2 experts holding the token's", c.Experts, c.ExpertsUsed, g, c.ExpertGroupsUsed)
		}
	} else {
		c.ExpertGroups, c.ExpertGroupsUsed = 0, 0
	}
	c.QKNopeDim, c.VHeadDim = keyLen-c.RopeDim, valueLen
	c.HeadDim, c.KVHeads = c.RopeDim+c.KVLoRARank, 1
	c.AttnScale = 1 / math.Sqrt(float64(keyLen))
	if s := &c.Scaling; s.Type == "yarn" && s.Factor > 1 {
		m := func(x float64) float64 { return 0.1*x*math.Log(s.Factor) + 1 }
		s.AttnFactor = m(s.MScale) / m(s.MScaleAllDim)
		c.AttnScale *= m(s.MScaleAllDim) * m(s.MScaleAllDim)
	}
	c.RopeStyle = RopeInterleaved
	if c.Experts == 0 {
		c.LeadingDenseLayers = 0
	}
	return nil
}

// deepseek2FromGGUF reads the MLA and expert keys llama.cpp writes for "deepseek2".
// c holds the generic keys read already (HeadDim is key_length as the file has it).
func deepseek2FromGGUF(f *gguf.File, c *Config) error {
	arch := c.Arch
	var err error
	geti := func(key string) int {
		n, e := ggufCount(f, arch+"."+key)
		if err == nil {
			err = e
		}
		return n
	}
	if _, ok := f.Get(arch + ".attention.key_length"); !ok {
		return fmt.Errorf("deepseek2: %s.attention.key_length is missing", arch)
	}
	if _, ok := f.Get(arch + ".rope.dimension_count"); !ok {
		return fmt.Errorf("deepseek2: %s.rope.dimension_count is missing", arch)
	}
	keyLen, valueLen := c.HeadDim, geti("attention.value_length")
	// Files written for llama.cpp's MLA cache give the head sizes of the decompressed
	// attention under keys of their own.
	if k := geti("attention.key_length_mla"); k > 0 {
		keyLen = k
	}
	if v := geti("attention.value_length_mla"); v > 0 {
		valueLen = v
	}
	c.QLoRARank = geti("attention.q_lora_rank")
	c.KVLoRARank = geti("attention.kv_lora_rank")
	c.LeadingDenseLayers = geti("leading_dense_block_count")
	shared := geti("expert_shared_count")
	gating := geti("expert_gating_func")
	groups, groupsUsed := geti("expert_group_count"), geti("expert_group_used_count")
	if err != nil {
		return err
	}
	switch gating {
	case 0, 1: // softmax (files before the key have none)
	case 2:
		c.ExpertSigmoid = true
	default:
		return fmt.Errorf("deepseek2: expert_gating_func %d is not supported (1 softmax, 2 sigmoid)", gating)
	}
	if groups > 1 {
		if !c.ExpertSigmoid {
			return fmt.Errorf("deepseek2: group-limited routing (%d groups) over softmax scores (DeepSeek-V2's) is not supported", groups)
		}
		c.ExpertGroups, c.ExpertGroupsUsed = groups, groupsUsed
		if groupsUsed == 0 {
			c.ExpertGroupsUsed = groups
		}
	}
	if _, ok := f.Get(arch + ".expert_weights_norm"); !ok {
		c.NormTopKProbs = false
	}
	c.ExpertScale = 1
	if v, ok := f.GetFloat64(arch + ".expert_weights_scale"); ok {
		c.ExpertScale = v
	}
	if c.Experts > 0 {
		c.SharedExpertFFN = shared * c.ExpertFFNDim
	}
	if c.Scaling.Type == "yarn" {
		// llama.cpp keeps 0.1·mscale_all_dim and scales cos and sin by nothing
		// (mscale = mscale_all_dim, as in every released model).
		if af := c.Scaling.AttnFactor; af != 0 && af != 1 {
			return fmt.Errorf("deepseek2: rope.scaling.attn_factor %v is not supported (only 1)", af)
		}
		mul, _ := f.GetFloat64(arch + ".rope.scaling.yarn_log_multiplier")
		c.Scaling.MScale, c.Scaling.MScaleAllDim = mul/0.1, mul/0.1
	}
	return mlaFromFile(c, keyLen, valueLen)
}

// deepseek2GGUFMetadata rewrites the generic keys of kvs that llama.cpp reads differently
// for "deepseek2" (the heads' key and value sizes, the KV head count) and adds its own.
func deepseek2GGUFMetadata(c Config, kvs []gguf.KV) []gguf.KV {
	u := func(key string, v int) gguf.KV {
		return gguf.KV{Key: c.Arch + "." + key, Value: gguf.Uint32(uint32(v))}
	}
	replace := map[string]gguf.KV{}
	for _, kv := range []gguf.KV{
		u("attention.head_count_kv", c.Heads),
		u("attention.key_length", c.QKNopeDim+c.RopeDim),
		u("attention.value_length", c.VHeadDim),
	} {
		replace[kv.Key] = kv
	}
	out := kvs[:0]
	for _, kv := range kvs {
		if r, ok := replace[kv.Key]; ok {
			kv = r
		}
		if kv.Key == c.Arch+".expert_shared_feed_forward_length" {
			continue // deepseek2 counts shared experts instead
		}
		out = append(out, kv)
	}
	// llama.cpp requires the YaRN multiplier of the attention scale even unscaled, where
	// it has no effect; it scales cos and sin by nothing (as MScale = MScaleAllDim does).
	logMul := 0.0
	if c.Scaling.Type == "yarn" {
		logMul = 0.1 * c.Scaling.MScaleAllDim
	}
	out = append(out, u("attention.kv_lora_rank", c.KVLoRARank),
		gguf.KV{Key: c.Arch + ".rope.scaling.yarn_log_multiplier", Value: gguf.Float32(float32(logMul))})
	if c.QLoRARank > 0 {
		out = append(out, u("attention.q_lora_rank", c.QLoRARank))
	}
	if c.Experts > 0 {
		shared := 0
		if c.ExpertFFNDim > 0 {
			shared = c.SharedExpertFFN / c.ExpertFFNDim
		}
		gating := 1
		if c.ExpertSigmoid {
			gating = 2
		}
		out = append(out, u("leading_dense_block_count", c.LeadingDenseLayers), u("expert_shared_count", shared),
			gguf.KV{Key: c.Arch + ".expert_weights_scale", Value: gguf.Float32(float32(orOne(c.ExpertScale)))},
			u("expert_gating_func", gating))
		if c.ExpertGroups > 1 {
			out = append(out, u("expert_group_count", c.ExpertGroups), u("expert_group_used_count", c.ExpertGroupsUsed))
		}
	}
	return out
}

// deepseek2FromHF reads DeepseekV2ForCausalLM's MLA and expert fields.
func deepseek2FromHF(h *hfconfig.Config, c *Config) error {
	d := h.DeepSeek
	if s := h.RopeScaling; s != nil && s.Type == "yarn" {
		// DeepSeek's code takes an absent mscale for 1 and an absent mscale_all_dim for 0.
		c.Scaling.MScale, c.Scaling.MScaleAllDim = s.MScale, s.MScaleAllDim
		if s.MScale == 0 {
			c.Scaling.MScale = 1
		}
		if s.AttentionFactor != 0 {
			return fmt.Errorf("deepseek: rope_scaling.attention_factor is not supported (mscale and mscale_all_dim set it)")
		}
	}
	switch d.ScoringFunc {
	case "", "softmax":
	case "sigmoid":
		c.ExpertSigmoid = true
	default:
		return fmt.Errorf("deepseek: scoring_func %q is not supported (softmax or sigmoid)", d.ScoringFunc)
	}
	switch d.TopKMethod {
	case "", "greedy":
	case "noaux_tc":
		if !c.ExpertSigmoid {
			return fmt.Errorf("deepseek: topk_method noaux_tc needs scoring_func sigmoid")
		}
		c.ExpertGroups, c.ExpertGroupsUsed = d.NGroup, d.TopKGroup
	default:
		return fmt.Errorf("deepseek: topk_method %q is not supported (greedy or noaux_tc)", d.TopKMethod)
	}
	c.QLoRARank, c.KVLoRARank, c.RopeDim = d.QLoRARank, d.KVLoRARank, d.QKRopeHeadDim
	c.LeadingDenseLayers, c.ExpertScale = d.FirstKDenseReplace, d.RoutedScalingFactor
	if h.NumExperts > 0 {
		c.SharedExpertFFN = d.NSharedExperts * c.ExpertFFNDim
	}
	return mlaFromFile(c, d.QKNopeHeadDim+d.QKRopeHeadDim, d.VHeadDim)
}

// deepseek2ToHF sets config.json's MLA and expert fields from c.
func deepseek2ToHF(c Config, h *hfconfig.Config) {
	shared := 0
	if c.ExpertFFNDim > 0 {
		shared = c.SharedExpertFFN / c.ExpertFFNDim
	}
	h.NumKeyValueHeads, h.HeadDim = c.Heads, c.QKNopeDim+c.RopeDim
	h.DeepSeek = hfconfig.DeepSeekConfig{
		QLoRARank: c.QLoRARank, KVLoRARank: c.KVLoRARank, QKNopeHeadDim: c.QKNopeDim, QKRopeHeadDim: c.RopeDim,
		VHeadDim: c.VHeadDim, FirstKDenseReplace: c.LeadingDenseLayers, NSharedExperts: shared,
		RoutedScalingFactor: orOne(c.ExpertScale), TopKMethod: "greedy",
	}
	if c.ExpertSigmoid {
		h.DeepSeek.TopKMethod, h.DeepSeek.ScoringFunc = "noaux_tc", "sigmoid"
		h.DeepSeek.NGroup, h.DeepSeek.TopKGroup = max(c.ExpertGroups, 1), max(c.ExpertGroupsUsed, 1)
	}
	h.NumExperts = c.Experts
	if c.Experts > 0 {
		h.MoEIntermediateSize = c.ExpertFFNDim
		h.IntermediateSize = c.FFNDim
	}
}

// mlaExpectations lists one layer's attention tensors of a model with MLA.
func mlaExpectations(c *Config, n *fieldNames) []expectation {
	hd := c.QKNopeDim + c.RopeDim
	q := c.Heads * hd
	kvb := c.Heads * (c.QKNopeDim + c.VHeadDim)
	from := n.heads + " and the MLA head sizes"
	es := []expectation{
		{name: "attn_kv_a_mqa.weight", shape: []int{c.KVLoRARank + c.RopeDim, c.Dim}, from: "kv_lora_rank, qk_rope_head_dim, " + n.dim},
		{name: "attn_kv_a_norm.weight", shape: []int{c.KVLoRARank}, from: "kv_lora_rank"},
		{name: "attn_kv_b.weight", shape: []int{kvb, c.KVLoRARank}, from: from + ", kv_lora_rank"},
		{name: "attn_output.weight", shape: []int{c.Dim, c.Heads * c.VHeadDim}, from: n.dim + ", " + from},
	}
	if c.QLoRARank > 0 {
		return append(es,
			expectation{name: "attn_q_a.weight", shape: []int{c.QLoRARank, c.Dim}, from: "q_lora_rank, " + n.dim},
			expectation{name: "attn_q_a_norm.weight", shape: []int{c.QLoRARank}, from: "q_lora_rank"},
			expectation{name: "attn_q_b.weight", shape: []int{q, c.QLoRARank}, from: from + ", q_lora_rank"})
	}
	return append(es, expectation{name: "attn_q.weight", shape: []int{q, c.Dim}, from: from + ", " + n.dim})
}

// joinKVB gives each layer whose file splits attn_kv_b into llama.cpp's attn_k_b
// ([heads][kv_lora_rank][qk_nope], each head's key up-projection transposed) and attn_v_b
// ([heads][v_head_dim][kv_lora_rank]) — the files written for llama.cpp's MLA cache —
// the attn_kv_b they were cut from, decoded to F32 ([heads x (qk_nope + v)][kv_lora_rank],
// each head's key rows then its value rows), in place of the two. A layer that has
// attn_kv_b keeps it.
func (m *Model) joinKVB() error {
	c := &m.Config
	nope, vd, r, heads := c.QKNopeDim, c.VHeadDim, c.KVLoRARank, c.Heads
	joined := map[string]*Tensor{} // attn_k_b's name -> the joined tensor; attn_v_b's -> nil
	for l := range min(c.Layers, len(m.Tensors)) {
		p := fmt.Sprintf("blk.%d.", l)
		kb, hasK := m.Tensor(p + "attn_k_b.weight")
		if _, ok := m.Tensor(p + "attn_kv_b.weight"); ok || !hasK {
			continue
		}
		vb, ok := m.Tensor(p + "attn_v_b.weight")
		if !ok {
			return fmt.Errorf("tensor %sattn_v_b.weight is missing (%sattn_k_b.weight needs it)", p, p)
		}
		for _, e := range []struct {
			t     *Tensor
			shape []int
		}{{kb, []int{heads, r, nope}}, {vb, []int{heads, vd, r}}} {
			if e.t.Elements() != product(e.shape) || e.t.Shape[len(e.t.Shape)-1] != e.shape[2] {
				return fmt.Errorf("tensor %s: shape %v, want %v (heads, kv_lora_rank and the MLA head sizes)", e.t.Name, e.t.Shape, e.shape)
			}
			if err := e.t.Check(); err != nil {
				return err
			}
		}
		kv, vv := make([]float32, kb.Elements()), make([]float32, vb.Elements())
		if err := quant.Dequantize(kb.Type, kb.Data, kv); err != nil {
			return fmt.Errorf("tensor %s: %w", kb.Name, err)
		}
		if err := quant.Dequantize(vb.Type, vb.Data, vv); err != nil {
			return fmt.Errorf("tensor %s: %w", vb.Name, err)
		}
		out := make([]float32, heads*(nope+vd)*r)
		for h := range heads {
			for i := range nope {
				row := out[(h*(nope+vd)+i)*r:][:r]
				for j := range row {
					row[j] = kv[(h*r+j)*nope+i]
				}
			}
			copy(out[(h*(nope+vd)+nope)*r:][:vd*r], vv[h*vd*r:][:vd*r])
		}
		data := make([]byte, 4*len(out))
		if err := quant.Quantize(quant.F32, out, data); err != nil {
			return err
		}
		joined[kb.Name] = &Tensor{Name: p + "attn_kv_b.weight", Type: quant.F32, Shape: []int{heads * (nope + vd), r}, Data: data}
		joined[vb.Name] = nil
	}
	if len(joined) == 0 {
		return nil
	}
	all := m.Tensors
	m.Tensors, m.byName = nil, nil
	for _, t := range all {
		if j, ok := joined[t.Name]; ok {
			if j != nil {
				m.addTensor(j)
			}
			continue
		}
		m.addTensor(t)
	}
	return nil
}
