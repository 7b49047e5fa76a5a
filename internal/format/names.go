package format

import (
	"fmt"
	"strconv"
	"strings"
)

// Hugging Face and GGUF name the same weights differently. kvasir uses GGUF names
// everywhere; these tables translate at the edges (loading and writing safetensors).

// hfLayerNames maps the per-layer part of a Hugging Face name to its GGUF twin.
var hfLayerNames = map[string]string{
	"input_layernorm.weight":          "attn_norm.weight",
	"self_attn.q_proj.weight":         "attn_q.weight",
	"self_attn.k_proj.weight":         "attn_k.weight",
	"self_attn.v_proj.weight":         "attn_v.weight",
	"self_attn.q_proj.bias":           "attn_q.bias",
	"self_attn.k_proj.bias":           "attn_k.bias",
	"self_attn.v_proj.bias":           "attn_v.bias",
	"self_attn.o_proj.weight":         "attn_output.weight",
	"self_attn.q_norm.weight":         "attn_q_norm.weight",
	"self_attn.k_norm.weight":         "attn_k_norm.weight",
	"post_attention_layernorm.weight": "ffn_norm.weight",
	"mlp.gate_proj.weight":            "ffn_gate.weight",
	"mlp.up_proj.weight":              "ffn_up.weight",
	"mlp.down_proj.weight":            "ffn_down.weight",
	// Mixtral
	"block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
	// Qwen2-MoE
	"mlp.gate.weight":                      "ffn_gate_inp.weight",
	"mlp.shared_expert.gate_proj.weight":   "ffn_gate_shexp.weight",
	"mlp.shared_expert.up_proj.weight":     "ffn_up_shexp.weight",
	"mlp.shared_expert.down_proj.weight":   "ffn_down_shexp.weight",
	"mlp.shared_expert_gate.weight":        "ffn_gate_inp_shexp.weight",
	"block_sparse_moe.experts.*.w1.weight": "ffn_gate.*.weight",
	"block_sparse_moe.experts.*.w2.weight": "ffn_down.*.weight",
	"block_sparse_moe.experts.*.w3.weight": "ffn_up.*.weight",
	"mlp.experts.*.gate_proj.weight":       "ffn_gate.*.weight",
	"mlp.experts.*.up_proj.weight":         "ffn_up.*.weight",
	"mlp.experts.*.down_proj.weight":       "ffn_down.*.weight",
}

var hfGlobalNames = map[string]string{
	"model.embed_tokens.weight": "token_embd.weight",
	"model.norm.weight":         "output_norm.weight",
	"lm_head.weight":            "output.weight",
}

// GGUFName translates a Hugging Face tensor name to GGUF naming. ok is false for names
// kvasir does not use (such as rotary caches some checkpoints store).
func GGUFName(hf string) (name string, ok bool) {
	if g, ok := hfGlobalNames[hf]; ok {
		return g, true
	}
	rest, found := strings.CutPrefix(hf, "model.layers.")
	if !found {
		return "", false
	}
	layer, rest, found := strings.Cut(rest, ".")
	if _, err := strconv.Atoi(layer); !found || err != nil {
		return "", false
	}
	if g, ok := hfLayerNames[rest]; ok {
		return "blk." + layer + "." + g, true
	}
	// Expert weights carry their expert number in the middle of the name.
	for pat, g := range hfLayerNames {
		if e, ok := matchStar(pat, rest); ok {
			return "blk." + layer + "." + strings.Replace(g, "*", e, 1), true
		}
	}
	return "", false
}

// archHFLayerNames are, per GGUF architecture, the per-layer names that differ from the
// Llama family's (hfLayerNames): Gemma's four norms a block, Phi-3's fused projections.
var archHFLayerNames = map[string]map[string]string{
	"gemma2": gemmaHFLayerNames,
	"gemma3": gemmaHFLayerNames,
	"phi3":   phi3HFLayerNames,
	"olmo2":  olmo2HFLayerNames,
	// DeepSeek's MLA and shared experts.
	"deepseek2": deepseek2HFLayerNames,
}

// GGUFNameFor translates a Hugging Face tensor name of a model of GGUF architecture arch,
// whose names may differ from the Llama family's (archHFLayerNames).
func GGUFNameFor(hf, arch string) (string, bool) {
	if layer, rest, ok := splitHFLayer(hf); ok {
		if g, ok := archHFLayerNames[arch][rest]; ok {
			return "blk." + layer + "." + g, true
		}
	}
	return GGUFName(hf)
}

// splitHFLayer splits "model.layers.N.rest" into N and rest.
func splitHFLayer(hf string) (layer, rest string, ok bool) {
	rest, found := strings.CutPrefix(hf, "model.layers.")
	if !found {
		return "", "", false
	}
	layer, rest, found = strings.Cut(rest, ".")
	if _, err := strconv.Atoi(layer); !found || err != nil {
		return "", "", false
	}
	return layer, rest, true
}

// HFName translates a GGUF tensor name to the Hugging Face name for the given GGUF
// architecture (Mixtral is "llama" with experts).
func HFName(name, arch string) (string, error) {
	if layer, rest, ok := strings.Cut(strings.TrimPrefix(name, "blk."), "."); ok && strings.HasPrefix(name, "blk.") {
		for hf, g := range archHFLayerNames[arch] {
			if g == rest {
				return "model.layers." + layer + "." + hf, nil
			}
		}
	}
	for hf, g := range hfGlobalNames {
		if g == name {
			return hf, nil
		}
	}
	rest, found := strings.CutPrefix(name, "blk.")
	layer, rest, found2 := strings.Cut(rest, ".")
	if !found || !found2 {
		return "", fmt.Errorf("tensor %q has no Hugging Face name", name)
	}
	var candidates []string
	for hf, g := range hfLayerNames {
		if g == rest {
			candidates = append(candidates, hf)
		} else if e, ok := matchStar(g, rest); ok {
			candidates = append(candidates, strings.Replace(hf, "*", e, 1))
		}
	}
	// Where Mixtral and Qwen2-MoE name a weight differently, pick by architecture.
	for _, hf := range candidates {
		mixtral := strings.HasPrefix(hf, "block_sparse_moe.")
		if len(candidates) == 1 || mixtral == (arch == "llama") {
			return "model.layers." + layer + "." + hf, nil
		}
	}
	return "", fmt.Errorf("tensor %q has no Hugging Face name", name)
}

// matchStar matches s against a pattern with one "*" standing for a decimal number and
// returns that number.
func matchStar(pattern, s string) (string, bool) {
	pre, post, ok := strings.Cut(pattern, "*")
	if !ok || !strings.HasPrefix(s, pre) || !strings.HasSuffix(s, post) || len(s) <= len(pre)+len(post) {
		return "", false
	}
	mid := s[len(pre) : len(s)-len(post)]
	if _, err := strconv.Atoi(mid); err != nil {
		return "", false
	}
	return mid, true
}
