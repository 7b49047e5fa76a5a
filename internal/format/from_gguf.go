package format

import (
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// openGGUF opens a GGUF model file.
func openGGUF(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := modelFromGGUF(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	m.closers = append(m.closers, f)
	return m, nil
}

// modelFromGGUF reads the hyperparameters, tensors, vocabulary and chat template of f.
func modelFromGGUF(f *gguf.File) (*Model, error) {
	m := &Model{Path: f.Path, Format: "gguf", Metadata: map[string]any{}}
	for _, kv := range f.KV {
		if v, ok := kv.Value.String(); ok && len(v) > 200 {
			m.Metadata[kv.Key] = fmt.Sprintf("<string of %d bytes>", len(v))
			continue
		}
		if a, ok := kv.Value.Array(); ok {
			m.Metadata[kv.Key] = fmt.Sprintf("<array of %d>", len(a))
			continue
		}
		m.Metadata[kv.Key] = kv.Value.Any()
	}
	cfg, err := configFromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", f.Path, err)
	}
	m.Config = cfg
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.TensorData(ti)
		if err != nil {
			return nil, err
		}
		shape := make([]int, len(ti.Dims))
		for j, d := range ti.Dims {
			shape[len(ti.Dims)-1-j] = int(d)
		}
		m.addTensor(&Tensor{Name: ti.Name, Type: ti.Type, Shape: shape, Data: data})
	}
	if t, ok := m.Tensor("rope_freqs.weight"); ok && m.Config.Scaling.Type == "" {
		m.Config.Scaling = inferLlama3Scaling(m.Config, t)
	}
	if _, ok := f.Get("tokenizer.ggml.model"); ok {
		v, err := vocabFromGGUF(f)
		if err != nil {
			return nil, fmt.Errorf("gguf %s: tokenizer: %w", f.Path, err)
		}
		m.Vocab = v
	}
	m.ChatTemplate, _ = f.GetString("tokenizer.chat_template")
	if err := m.inferFromTensors(); err != nil {
		return nil, fmt.Errorf("gguf %s: %w", f.Path, err)
	}
	return m, nil
}

// configFromGGUF maps the "{arch}.*" metadata keys llama.cpp writes onto a Config.
func configFromGGUF(f *gguf.File) (Config, error) {
	arch := f.Architecture()
	if arch == "" {
		return Config{}, fmt.Errorf("general.architecture is missing")
	}
	c := Config{Arch: arch}
	switch arch {
	case "llama", "mistral", "qwen2", "qwen3", "qwen2moe", "qwen3moe":
	default:
		return Config{}, fmt.Errorf("general.architecture %q is not supported (want llama, mistral, qwen2, qwen3, qwen2moe)", arch)
	}
	if arch == "mistral" {
		c.Arch = "llama"
	}
	geti := func(key string) int {
		v, _ := f.GetUint64(arch + "." + key)
		return int(v)
	}
	getf := func(key string, def float64) float64 {
		if v, ok := f.GetFloat64(arch + "." + key); ok {
			return v
		}
		return def
	}
	c.ContextLen = geti("context_length")
	c.Dim = geti("embedding_length")
	c.Layers = geti("block_count")
	c.FFNDim = geti("feed_forward_length")
	c.Heads = geti("attention.head_count")
	c.KVHeads = geti("attention.head_count_kv")
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	c.HeadDim = geti("attention.key_length")
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	c.RopeDim = geti("rope.dimension_count")
	if c.RopeDim == 0 {
		c.RopeDim = c.HeadDim
	}
	c.NormEps = getf("attention.layer_norm_rms_epsilon", 1e-5)
	c.RopeTheta = getf("rope.freq_base", 10000)
	c.VocabSize = geti("vocab_size")
	if c.VocabSize == 0 {
		if toks, ok := f.GetStrings("tokenizer.ggml.tokens"); ok {
			c.VocabSize = len(toks)
		}
	}
	if t, ok := f.GetString(arch + ".rope.scaling.type"); ok && t != "none" {
		c.Scaling.Type = t
		c.Scaling.Factor = getf("rope.scaling.factor", 1)
		c.Scaling.OriginalContextLen = geti("rope.scaling.original_context_length")
		c.Scaling.BetaFast = getf("rope.scaling.yarn_beta_fast", 32)
		c.Scaling.BetaSlow = getf("rope.scaling.yarn_beta_slow", 1)
		c.Scaling.AttnFactor = getf("rope.scaling.attn_factor", 0)
	}
	c.Experts = geti("expert_count")
	c.ExpertsUsed = geti("expert_used_count")
	c.ExpertFFNDim = geti("expert_feed_forward_length")
	if c.Experts > 0 && c.ExpertFFNDim == 0 {
		c.ExpertFFNDim = c.FFNDim
	}
	c.SharedExpertFFN = geti("expert_shared_feed_forward_length")
	if c.Experts > 0 {
		// Mixtral renormalizes the chosen experts' weights; Qwen2-MoE does not unless told.
		c.NormTopKProbs = arch == "llama" || arch == "mistral"
		if v, ok := f.GetBool(arch + ".expert_weights_norm"); ok {
			c.NormTopKProbs = v
		}
	}
	c.SlidingWindow = geti("attention.sliding_window")
	// llama.cpp's "llama" converter permutes q/k rows into the interleaved rotary layout;
	// the Qwen architectures keep the Hugging Face (NeoX) layout.
	c.RopeStyle = RopeInterleaved
	if slices.Contains([]string{"qwen2", "qwen3", "qwen2moe", "qwen3moe"}, arch) {
		c.RopeStyle = RopeNeox
	}
	c.QKNorm = arch == "qwen3" || arch == "qwen3moe"
	return c, nil
}

// inferLlama3Scaling recovers the Llama 3 rotary scaling parameters that llama.cpp stores
// only as the rope_freqs.weight divisors: Llama 3.1 and later use a low-frequency factor
// of 1, a high-frequency factor of 4 and an original context of 8192, and the largest
// divisor is the scaling factor. When the divisors do not fit that recipe the scaling is
// left empty (the model still applies the tensor as given).
func inferLlama3Scaling(c Config, t *Tensor) RopeScaling {
	if t.Type != quant.F32 || t.Elements() != c.RopeDim/2 {
		return RopeScaling{}
	}
	freqs := make([]float32, t.Elements())
	if err := quant.Dequantize(quant.F32, t.Data, freqs); err != nil {
		return RopeScaling{}
	}
	factor := float32(0)
	for _, f := range freqs {
		factor = max(factor, f)
	}
	guess := c
	guess.Scaling = RopeScaling{Type: "llama3", Factor: float64(factor), LowFreqFactor: 1, HighFreqFactor: 4, OriginalContextLen: 8192}
	for i, f := range Llama3RopeFreqs(guess) {
		if d := f - freqs[i]; d > 1e-3*factor || d < -1e-3*factor {
			return RopeScaling{}
		}
	}
	return guess.Scaling
}
