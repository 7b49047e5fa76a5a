package encoder

import (
	"strconv"
	"strings"
)

// Tensor names in GGUF naming (llama.cpp's for "bert"):
//
//	token_embd.weight, position_embd.weight, token_types.weight   the three embeddings
//	token_embd_norm.{weight,bias}                                  their LayerNorm
//	blk.N.attn_{q,k,v,output}.{weight,bias}                        self-attention
//	blk.N.attn_output_norm.{weight,bias}                           LayerNorm after attention
//	blk.N.ffn_{up,down}.{weight,bias}                              the GELU MLP
//	blk.N.layer_output_norm.{weight,bias}                          LayerNorm after the MLP
//	cls.{weight,bias}                                              the pooler (dense + tanh)
//	cls.output.{weight,bias}                                       the classifier
var hfGlobal = map[string]string{
	"embeddings.word_embeddings.weight":       "token_embd.weight",
	"embeddings.position_embeddings.weight":   "position_embd.weight",
	"embeddings.token_type_embeddings.weight": "token_types.weight",
	"embeddings.LayerNorm.weight":             "token_embd_norm.weight",
	"embeddings.LayerNorm.bias":               "token_embd_norm.bias",
	"pooler.dense.weight":                     "cls.weight",
	"pooler.dense.bias":                       "cls.bias",
	"classifier.weight":                       "cls.output.weight",
	"classifier.bias":                         "cls.output.bias",
}

var hfLayer = map[string]string{
	"attention.self.query":       "attn_q",
	"attention.self.key":         "attn_k",
	"attention.self.value":       "attn_v",
	"attention.output.dense":     "attn_output",
	"attention.output.LayerNorm": "attn_output_norm",
	"intermediate.dense":         "ffn_up",
	"output.dense":               "ffn_down",
	"output.LayerNorm":           "layer_output_norm",
}

// paramNames maps a parameter's last name part to GGUF's: older BERT checkpoints name a
// LayerNorm's parameters gamma and beta.
var paramNames = map[string]string{"weight": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}

// ggufName translates a Hugging Face BERT tensor name (with or without the "bert." prefix
// of BertForSequenceClassification) to GGUF naming; ok is false for names the encoder
// does not use (position_ids buffers, say).
func ggufName(hf string) (string, bool) {
	hf = strings.TrimPrefix(hf, "bert.")
	if g, ok := hfGlobal[strings.Replace(strings.Replace(hf, "LayerNorm.gamma", "LayerNorm.weight", 1), "LayerNorm.beta", "LayerNorm.bias", 1)]; ok {
		return g, true
	}
	rest, ok := strings.CutPrefix(hf, "encoder.layer.")
	if !ok {
		return "", false
	}
	layer, rest, ok := strings.Cut(rest, ".")
	if _, err := strconv.Atoi(layer); !ok || err != nil {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	g, ok := hfLayer[rest[:i]]
	suffix, known := paramNames[rest[i+1:]]
	if !ok || !known {
		return "", false
	}
	return "blk." + layer + "." + g + "." + suffix, true
}

// hfName is the inverse of ggufName, for writing a BertModel or
// BertForSequenceClassification folder (classifier true: the "bert." prefix).
func hfName(g string, classifier bool) (string, bool) {
	prefix := ""
	if classifier {
		prefix = "bert."
	}
	for hf, name := range hfGlobal {
		if name == g {
			if strings.HasPrefix(hf, "classifier.") {
				return hf, true
			}
			return prefix + hf, true
		}
	}
	rest, ok := strings.CutPrefix(g, "blk.")
	layer, rest, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	for hf, name := range hfLayer {
		if name == rest[:i] {
			return prefix + "encoder.layer." + layer + "." + hf + rest[i:], true
		}
	}
	return "", false
}

// nomic-bert's Hugging Face names (NomicBertModel): the embeddings' norm is emb_ln, layers
// are encoder.layers.N with a fused attn.Wqkv, SwiGLU's up and gate are mlp.fc11 and
// mlp.fc12.
var nomicGlobal = map[string]string{
	"embeddings.word_embeddings.weight":       "token_embd.weight",
	"embeddings.token_type_embeddings.weight": "token_types.weight",
	"emb_ln.weight": "token_embd_norm.weight",
	"emb_ln.bias":   "token_embd_norm.bias",
}

var nomicLayer = map[string]string{
	"attn.Wqkv":     "attn_qkv",
	"attn.out_proj": "attn_output",
	"norm1":         "attn_output_norm",
	"mlp.fc11":      "ffn_up",
	"mlp.fc12":      "ffn_gate",
	"mlp.fc2":       "ffn_down",
	"norm2":         "layer_output_norm",
}

// nomicGGUFName translates a NomicBertModel tensor name to GGUF naming; ok is false for
// names the encoder does not use.
func nomicGGUFName(hf string) (string, bool) {
	if g, ok := nomicGlobal[hf]; ok {
		return g, true
	}
	rest, ok := strings.CutPrefix(hf, "encoder.layers.")
	if !ok {
		return "", false
	}
	layer, rest, ok := strings.Cut(rest, ".")
	if _, err := strconv.Atoi(layer); !ok || err != nil {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	g, ok := nomicLayer[rest[:i]]
	if suffix := rest[i+1:]; !ok || (suffix != "weight" && suffix != "bias") {
		return "", false
	}
	return "blk." + layer + "." + g + rest[i:], true
}

// nomicHFName is the inverse of nomicGGUFName, for writing a NomicBertModel folder.
func nomicHFName(g string) (string, bool) {
	for hf, name := range nomicGlobal {
		if name == g {
			return hf, true
		}
	}
	rest, ok := strings.CutPrefix(g, "blk.")
	layer, rest, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	for hf, name := range nomicLayer {
		if name == rest[:i] {
			return "encoder.layers." + layer + "." + hf + rest[i:], true
		}
	}
	return "", false
}

// jina-bert-v2's Hugging Face names (JinaBertModel, JinaBertForMaskedLM): BERT's, with
// q/k norms, the MLP's fused gate and up projection (mlp.gated_layers, the gate's rows
// first; jina-v2-code's mlp.up_gated_layer, the up rows first) and its own down projection
// and norm. The fused matrices keep a GGUF-style name of their own until the file is
// opened (splitGateUp).
var jinaLayer = map[string]string{
	"attention.self.query":        "attn_q",
	"attention.self.key":          "attn_k",
	"attention.self.value":        "attn_v",
	"attention.self.layer_norm_q": "attn_q_norm",
	"attention.self.layer_norm_k": "attn_k_norm",
	"attention.output.dense":      "attn_output",
	"attention.output.LayerNorm":  "attn_output_norm",
	"layer_norm_1":                "attn_norm_2",
	"mlp.gated_layers":            "ffn_gate_up",
	"mlp.up_gated_layer":          "ffn_up_gate",
	"mlp.wo":                      "ffn_down",
	"mlp.down_layer":              "ffn_down",
	"mlp.layernorm":               "layer_output_norm",
	"layer_norm_2":                "layer_output_norm",
}

// jinaGGUFName translates a jina-bert-v2 tensor name (with or without the "bert." prefix)
// to GGUF naming; ok is false for names the encoder does not use (the masked-LM head).
func jinaGGUFName(hf string) (string, bool) {
	hf = strings.TrimPrefix(hf, "bert.")
	switch hf {
	case "embeddings.word_embeddings.weight", "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
		"embeddings.LayerNorm.bias", "classifier.weight", "classifier.bias":
		return hfGlobal[hf], true
	}
	rest, ok := strings.CutPrefix(hf, "encoder.layer.")
	if !ok {
		return "", false
	}
	layer, rest, ok := strings.Cut(rest, ".")
	if _, err := strconv.Atoi(layer); !ok || err != nil {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	g, ok := jinaLayer[rest[:i]]
	if suffix := rest[i+1:]; !ok || (suffix != "weight" && suffix != "bias") {
		return "", false
	}
	return "blk." + layer + "." + g + rest[i:], true
}

// jinaHFName is the inverse of jinaGGUFName for the names a JinaBertModel folder is written
// with (mlp.gated_layers, mlp.wo and mlp.layernorm).
func jinaHFName(g string) (string, bool) {
	for _, hf := range []string{"embeddings.word_embeddings.weight", "embeddings.token_type_embeddings.weight",
		"embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"} {
		if hfGlobal[hf] == g {
			return hf, true
		}
	}
	rest, ok := strings.CutPrefix(g, "blk.")
	layer, rest, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false
	}
	for _, hf := range []string{"attention.self.query", "attention.self.key", "attention.self.value", "attention.self.layer_norm_q",
		"attention.self.layer_norm_k", "attention.output.dense", "attention.output.LayerNorm", "layer_norm_1",
		"mlp.gated_layers", "mlp.wo", "mlp.layernorm"} {
		if jinaLayer[hf] == rest[:i] {
			return "encoder.layer." + layer + "." + hf + rest[i:], true
		}
	}
	return "", false
}
