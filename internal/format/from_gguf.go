package format

import (
	"fmt"
	"math"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// openGGUF opens a GGUF model file. A file whose header Open refuses is returned with the
// error (see Inspect), its mapping still open.
func openGGUF(path string, l Limits) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := modelFromGGUF(f, l)
	m.closers = append(m.closers, f)
	return m, err
}

// modelFromGGUF reads the hyperparameters, tensors, vocabulary and chat template of f and
// checks them (within limits l). The Model is returned even when the check fails.
func modelFromGGUF(f *gguf.File, l Limits) (*Model, error) {
	m := &Model{Path: f.Path, Format: "gguf", Metadata: map[string]any{}, names: ggufNames(f.Architecture())}
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
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.TensorData(ti)
		if err != nil {
			return m, err
		}
		shape := make([]int, len(ti.Dims))
		for j, d := range ti.Dims {
			shape[len(ti.Dims)-1-j] = int(d) // the parser keeps dimensions within int64
		}
		m.addTensor(&Tensor{Name: ti.Name, Type: ti.Type, Shape: shape, Data: data})
	}
	cfg, err := configFromGGUF(f)
	m.Config = cfg
	if err != nil {
		return m, fmt.Errorf("gguf %s: %w", f.Path, err)
	}
	m.names.nameDefaults(f)
	if t, ok := m.Tensor("rope_freqs.weight"); ok && m.Config.Scaling.Type == "" {
		m.Config.Scaling = inferLlama3Scaling(m.Config, t)
	}
	if _, ok := f.Get("tokenizer.ggml.model"); ok {
		v, err := vocabFromGGUF(f)
		if err != nil {
			return m, fmt.Errorf("gguf %s: tokenizer: %w", f.Path, err)
		}
		m.Vocab = v
	}
	m.ChatTemplate, _ = f.GetString("tokenizer.chat_template")
	if m.Config.Arch == "phi3" {
		if err := m.splitPhi3(); err != nil {
			return m, fmt.Errorf("gguf %s: %w", f.Path, err)
		}
	}
	if m.Config.MLA() {
		if err := m.joinKVB(); err != nil {
			return m, fmt.Errorf("gguf %s: %w", f.Path, err)
		}
	}
	if err := m.inferFromTensors(l); err != nil {
		return m, fmt.Errorf("gguf %s: %w", f.Path, err)
	}
	return m, nil
}

// nameDefaults renames the fields whose keys f lacks after what stands in for them.
func (n *fieldNames) nameDefaults(f *gguf.File) {
	arch := f.Architecture()
	absent := func(key string) bool { _, ok := f.Get(arch + "." + key); return !ok }
	if absent("vocab_size") {
		n.vocab = "the vocabulary size (the tokens of tokenizer.ggml.tokens, else the rows of token_embd.weight)"
	}
	if absent("attention.head_count_kv") {
		n.kvHeads = n.heads
	}
	if absent("attention.key_length") {
		n.headDim = n.dim + " / " + n.heads
	}
	if absent("rope.dimension_count") {
		n.ropeDim = n.headDim
	}
	if absent("expert_feed_forward_length") {
		n.expertFFN = n.ffn
	}
}

// ggufCount reads the count stored under key: 0 when absent, an error when it is not a
// non-negative integer that fits an int32 (no count of a real model comes near; the limits
// check the rest).
func ggufCount(f *gguf.File, key string) (int, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, nil
	}
	n, ok := v.Int64()
	if !ok {
		if u, ok := v.Uint64(); ok {
			return 0, fmt.Errorf("%s %d is out of range", key, u)
		}
		return 0, fmt.Errorf("%s is %s, want an integer", key, v.Type)
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("%s %d is out of range (0..%d)", key, n, math.MaxInt32)
	}
	return int(n), nil
}

// configFromGGUF maps the "{arch}.*" metadata keys llama.cpp writes onto a Config.
func configFromGGUF(f *gguf.File) (Config, error) {
	arch := f.Architecture()
	if arch == "" {
		return Config{}, fmt.Errorf("general.architecture is missing")
	}
	c := Config{Arch: arch}
	switch arch {
	case "llama", "mistral", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma2", "gemma3", "phi3", "granite", "olmo2", "deepseek2":
	default:
		return Config{}, fmt.Errorf("general.architecture %q is not supported (want llama, mistral, qwen2, qwen3, qwen2moe, gemma2, gemma3, phi3, granite, olmo2, deepseek2)", arch)
	}
	if arch == "mistral" {
		c.Arch = "llama"
	}
	var err error
	geti := func(key string) int {
		n, e := ggufCount(f, arch+"."+key)
		if err == nil {
			err = e
		}
		return n
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
		// Mixtral and Qwen3-MoE renormalize the chosen experts' weights (llama.cpp's
		// qwen3moe always does); Qwen2-MoE does not unless told.
		c.NormTopKProbs = arch == "llama" || arch == "mistral" || arch == "qwen3moe"
		if v, ok := f.GetBool(arch + ".expert_weights_norm"); ok {
			c.NormTopKProbs = v
		}
	}
	c.SlidingWindow = geti("attention.sliding_window")
	// llama.cpp's "llama" converter permutes q/k rows into the interleaved rotary layout;
	// the Qwen architectures keep the Hugging Face (NeoX) layout.
	c.RopeStyle = RopeInterleaved
	if slices.Contains([]string{"qwen2", "qwen3", "qwen2moe", "qwen3moe", "phi3"}, arch) {
		c.RopeStyle = RopeNeox
	}
	c.QKNorm = arch == "qwen3" || arch == "qwen3moe"
	if isGemma(arch) {
		gemmaFromGGUF(f, &c)
	}
	if arch == "granite" {
		graniteFromGGUF(f, &c)
	}
	if arch == "olmo2" {
		olmo2Config(&c)
	}
	if arch == "deepseek2" && err == nil {
		err = deepseek2FromGGUF(f, &c)
	}
	return c, err
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
