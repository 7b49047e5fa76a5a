package format

// OLMo 2 (AI2) moves the block's norms after attention and the MLP (post_attention_layernorm
// and post_feedforward_layernorm, llama.cpp's post_attention_norm and post_ffw_norm), with
// none before them, and normalizes q and k over the whole projection (q_norm of
// heads x head size values) before rotary embedding, in the NeoX layout.

// olmo2HFLayerNames are OLMo 2's post-norms' names.
var olmo2HFLayerNames = map[string]string{
	"post_attention_layernorm.weight":   "post_attention_norm.weight",
	"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}

// olmo2Config sets the Config fields of OLMo 2's block.
func olmo2Config(c *Config) {
	c.PostNorms, c.NoPreNorms, c.QKNorm, c.QKNormFull, c.RopeStyle = true, true, true, true, RopeNeox
}
