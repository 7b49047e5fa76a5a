package format

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// archOfHF maps Hugging Face architecture classes to GGUF architecture names.
var archOfHF = map[string]string{
	hfconfig.Llama:      "llama",
	hfconfig.Mistral:    "llama",
	hfconfig.Mixtral:    "llama",
	hfconfig.Qwen2:      "qwen2",
	hfconfig.Qwen3:      "qwen3",
	hfconfig.Qwen2MoE:   "qwen2moe",
	hfconfig.Qwen3MoE:   "qwen3moe",
	hfconfig.Gemma2:     "gemma2",
	hfconfig.Gemma3:     "gemma3",
	hfconfig.Phi3:       "phi3",
	hfconfig.Granite:    "granite",
	hfconfig.Olmo2:      "olmo2",
	hfconfig.DeepSeekV2: "deepseek2",
	hfconfig.DeepSeekV3: "deepseek2",
}

// ConfigFromHF turns a parsed config.json into a Config. Hugging Face checkpoints keep q/k
// rows in the NeoX rotary order, so the result has RopeStyle RopeNeox.
func ConfigFromHF(h *hfconfig.Config) (Config, error) {
	arch, ok := archOfHF[h.Architecture]
	if !ok {
		return Config{}, fmt.Errorf("architecture %q is not supported", h.Architecture)
	}
	if h.OutputBias() {
		return Config{}, fmt.Errorf("attention_bias on the output projection is not supported")
	}
	if len(h.MLPOnlyLayers) > 0 || h.DecoderSparseStep > 1 {
		return Config{}, fmt.Errorf("Qwen-MoE models with dense layers (mlp_only_layers, decoder_sparse_step) are not supported")
	}
	c := Config{
		Arch: arch, VocabSize: h.VocabSize, Dim: h.HiddenSize, Layers: h.NumHiddenLayers,
		Heads: h.NumAttentionHeads, KVHeads: h.NumKeyValueHeads, HeadDim: h.HeadDim, RopeDim: h.HeadDim,
		FFNDim: h.IntermediateSize, ContextLen: h.MaxPositionEmbeddings, NormEps: h.RMSNormEps,
		RopeTheta: h.RopeTheta, RopeStyle: RopeNeox, TiedEmbeddings: h.TieWordEmbeddings,
		QKVBias: h.QKVBias(), QKNorm: h.QKNorm(), SlidingWindow: h.SlidingWindow,
	}
	if s := h.RopeScaling; s != nil {
		c.Scaling = RopeScaling{
			Type: s.Type, Factor: s.Factor, LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor,
			OriginalContextLen: s.OriginalMaxPositionEmbeddings, BetaFast: s.BetaFast, BetaSlow: s.BetaSlow,
			AttnFactor: s.AttentionFactor,
		}
	}
	if isGemma(arch) {
		if err := gemmaFromHF(h, &c); err != nil {
			return Config{}, err
		}
	}
	if arch == "granite" {
		graniteFromHF(h, &c)
	}
	if arch == "olmo2" {
		olmo2Config(&c)
	}
	if h.IsMoE() {
		c.Experts, c.ExpertsUsed, c.NormTopKProbs = h.NumExperts, h.NumExpertsPerTok, h.NormTopKProb
		c.ExpertFFNDim = h.IntermediateSize
		if h.MoEIntermediateSize > 0 {
			c.ExpertFFNDim = h.MoEIntermediateSize
		}
		c.SharedExpertFFN = h.SharedExpertIntermediateSize
		if h.Architecture == hfconfig.Mixtral {
			c.NormTopKProbs = true
		}
	}
	if arch == "deepseek2" {
		if err := deepseek2FromHF(h, &c); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// HFArchitecture returns the Hugging Face class a Config is written as.
func HFArchitecture(c Config) string {
	switch {
	case c.Arch == "qwen2":
		return hfconfig.Qwen2
	case c.Arch == "qwen3":
		return hfconfig.Qwen3
	case c.Arch == "qwen2moe":
		return hfconfig.Qwen2MoE
	case c.Arch == "qwen3moe":
		return hfconfig.Qwen3MoE
	case c.Arch == "gemma2":
		return hfconfig.Gemma2
	case c.Arch == "gemma3":
		return hfconfig.Gemma3
	case c.Arch == "phi3":
		return hfconfig.Phi3
	case c.Arch == "granite":
		return hfconfig.Granite
	case c.Arch == "olmo2":
		return hfconfig.Olmo2
	case c.Arch == "deepseek2" && c.ExpertSigmoid:
		return hfconfig.DeepSeekV3
	case c.Arch == "deepseek2":
		return hfconfig.DeepSeekV2
	case c.Experts > 0:
		return hfconfig.Mixtral
	case c.SlidingWindow > 0:
		return hfconfig.Mistral // Llama has no window
	}
	return hfconfig.Llama
}

// ConfigToHF returns the config.json description of c.
func ConfigToHF(c Config, dtype quant.Type) (*hfconfig.Config, error) {
	h, err := hfconfig.NewConfig(HFArchitecture(c), c.VocabSize, c.Dim, c.FFNDim, c.Layers, c.Heads, c.KVHeads)
	if err != nil {
		return nil, err
	}
	h.HeadDim, h.MaxPositionEmbeddings, h.RMSNormEps, h.RopeTheta = c.HeadDim, c.ContextLen, c.NormEps, c.RopeTheta
	h.TieWordEmbeddings = c.TiedEmbeddings
	h.TorchDType = map[quant.Type]string{quant.F32: "float32", quant.F16: "float16", quant.BF16: "bfloat16"}[dtype]
	if c.Scaling.Type != "" {
		s := c.Scaling
		h.RopeScaling = &hfconfig.RopeScaling{
			Type: s.Type, Factor: s.Factor, OriginalMaxPositionEmbeddings: s.OriginalContextLen,
			LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor,
			BetaFast: s.BetaFast, BetaSlow: s.BetaSlow, AttentionFactor: s.AttnFactor,
		}
		if c.MLA() {
			// DeepSeek's YaRN: mscale and mscale_all_dim give the attention factor.
			h.RopeScaling.AttentionFactor, h.RopeScaling.MScale, h.RopeScaling.MScaleAllDim = 0, s.MScale, s.MScaleAllDim
		}
	}
	if c.Experts > 0 {
		h.NumExperts, h.NumExpertsPerTok, h.NormTopKProb = c.Experts, c.ExpertsUsed, c.NormTopKProbs
		if h.Architecture == hfconfig.Qwen2MoE || h.Architecture == hfconfig.Qwen3MoE {
			h.MoEIntermediateSize, h.SharedExpertIntermediateSize = c.ExpertFFNDim, c.SharedExpertFFN
		} else {
			h.IntermediateSize = c.ExpertFFNDim
		}
	}
	if c.SlidingWindow > 0 {
		h.SlidingWindow, h.UseSlidingWindow = c.SlidingWindow, true
	}
	if isGemma(c.Arch) {
		gemmaToHF(c, h)
	}
	if c.Arch == "granite" {
		graniteToHF(c, h)
	}
	if c.MLA() {
		deepseek2ToHF(c, h)
	}
	return h, nil
}

// dtypeOfSafetensors maps the safetensors element types kvasir computes with.
var dtypeOfSafetensors = map[safetensors.DType]quant.Type{
	safetensors.F32: quant.F32, safetensors.F16: quant.F16, safetensors.BF16: quant.BF16,
}

// openHF opens a Hugging Face model folder: config.json, safetensors weights (one file or
// sharded), and the tokenizer and generation files when present. Once the weights are
// open, a failing check returns the Model with the error (see Inspect).
func openHF(dir string, l Limits) (*Model, error) {
	h, err := hfconfig.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := ConfigFromHF(h)
	if err != nil {
		return nil, fmt.Errorf("hf %s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Path: dir, Format: "safetensors", Config: cfg, Metadata: map[string]any{}, names: hfNames(h.Architecture == hfconfig.Mixtral)}
	m.closers = append(m.closers, set)
	for k, v := range set.Metadata() {
		m.Metadata[k] = v
	}
	m.Metadata["architecture"] = h.Architecture
	m.Metadata["torch_dtype"] = h.TorchDType
	embdFromHead, err := tiedHeadOnly(set, h.TieWordEmbeddings)
	if err != nil {
		return m, fmt.Errorf("hf %s: %w", dir, err)
	}
	for _, hfName := range set.Names() {
		ti, _ := set.Tensor(hfName)
		name, ok := GGUFNameFor(hfName, cfg.Arch)
		if !ok {
			continue // e.g. rotary_emb.inv_freq caches, which kvasir recomputes
		}
		if l, ok := layerOf(name); ok && cfg.MLA() && l >= cfg.Layers {
			continue // DeepSeek-V3's multi-token-prediction layers follow the model's; not used
		}
		if embdFromHead && name == "output.weight" {
			name = "token_embd.weight" // the one matrix is embedding and output (Config.TiedEmbeddings)
		}
		if ti.DType == safetensors.F8E4M3 {
			t, err := fp8FromSafetensors(set, hfName, name, ti)
			if err != nil {
				return m, fmt.Errorf("hf %s: %w", dir, err)
			}
			m.addTensor(t)
			continue
		}
		t, ok := dtypeOfSafetensors[ti.DType]
		if !ok {
			return m, fmt.Errorf("hf %s: tensor %q: dtype %s is not supported (want F32, F16, BF16, or F8_E4M3 with a weight_scale)", dir, hfName, ti.DType)
		}
		tensor := &Tensor{Name: name, Type: t, Shape: ti.Shape, Data: ti.Data}
		if gemmaNormShifted(cfg.Arch, name) {
			if tensor, err = shiftNorm(tensor, 1); err != nil {
				return m, fmt.Errorf("hf %s: %w", dir, err)
			}
		}
		m.addTensor(tensor)
	}
	if err := m.readHFTokenizer(dir); err != nil {
		return m, err
	}
	if cfg.Arch == "phi3" {
		if err := m.splitPhi3(); err != nil {
			return m, fmt.Errorf("hf %s: %w", dir, err)
		}
	}
	if err := m.inferFromTensors(l); err != nil {
		return m, fmt.Errorf("hf %s: %w", dir, err)
	}
	return m, nil
}

// tiedHeadOnly reports whether a checkpoint with tied embeddings stores the shared matrix
// only as lm_head.weight (transformers keeps one name of tied weights when it saves, and
// small models often keep that one), and fails when the embedding is missing otherwise.
func tiedHeadOnly(set *safetensors.Set, tied bool) (bool, error) {
	const embd, head = "model.embed_tokens.weight", "lm_head.weight"
	if _, ok := set.Tensor(embd); ok {
		return false, nil
	}
	_, hasHead := set.Tensor(head)
	switch {
	case hasHead && tied:
		return true, nil
	case hasHead:
		return false, fmt.Errorf("tensor %s is missing (%s stands for it only with tie_word_embeddings: true in config.json)", embd, head)
	}
	return false, fmt.Errorf("tensor %s is missing, and there is no %s to tie it to", embd, head)
}

// readHFTokenizer loads tokenizer.json, the chat template and generation_config.json.
func (m *Model) readHFTokenizer(dir string) error {
	tokJSON := filepath.Join(dir, "tokenizer.json")
	tokCfg := filepath.Join(dir, "tokenizer_config.json")
	if fileExists(tokJSON) {
		v, err := vocabFromHFFiles(tokJSON, tokCfg)
		if err != nil {
			return err
		}
		m.Vocab = v
	}
	if fileExists(tokCfg) {
		tc, err := hfconfig.ReadTokenizerConfig(tokCfg)
		if err != nil {
			return err
		}
		m.ChatTemplate = tc.ChatTemplate
	}
	// Newer checkpoints keep the template in a file of its own.
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		m.ChatTemplate = string(b)
	}
	if p := filepath.Join(dir, "generation_config.json"); fileExists(p) {
		g, err := hfconfig.ReadGenerationConfig(p)
		if err != nil {
			return err
		}
		m.Generation = g
		if m.Vocab != nil {
			for _, id := range g.EOSTokenIDs {
				if id != m.Vocab.EOS && id >= 0 && id < len(m.Vocab.Tokens) {
					m.Vocab.EOG = append(m.Vocab.EOG, id)
				}
			}
		}
	}
	return nil
}

// WriteHF writes a Hugging Face model folder: config.json, model.safetensors (sharded above
// maxShard bytes when maxShard > 0) and generation_config.json. The tensors must be in GGUF
// naming and the NeoX rotary layout, in F32, F16 or BF16, or quant.FP8 matrices, written
// as an F8_E4M3 weight and its F32 weight_scale ([out, 1], one scale per output channel,
// the compressed-tensors layout). Tokenizer files are the caller's.
func WriteHF(dir string, c Contents, dtype quant.Type, tensors []OutTensor, maxShard int64, progress func(done, total int64)) error {
	h, err := ConfigToHF(c.Config, dtype)
	if err != nil {
		return err
	}
	if c.Vocab != nil {
		h.BOSTokenID, h.EOSTokenIDs = nil, nil
		if c.Vocab.BOS >= 0 {
			h.BOSTokenID = hfconfig.TokenIDs{c.Vocab.BOS}
		}
		if c.Vocab.EOS >= 0 {
			h.EOSTokenIDs = hfconfig.TokenIDs{c.Vocab.EOS}
		}
	}
	cfgJSON, err := h.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		return err
	}
	gen := &hfconfig.GenerationConfig{BOSTokenID: h.BOSTokenID, EOSTokenIDs: h.EOSTokenIDs}
	genJSON, err := gen.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), genJSON, 0o644); err != nil {
		return err
	}
	sts := make([]safetensors.WriteTensor, 0, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if t.Name == "rope_freqs.weight" {
			continue // config.json's rope_scaling says the same
		}
		var st safetensors.DType
		switch t.Type {
		case quant.F32:
			st = safetensors.F32
		case quant.F16:
			st = safetensors.F16
		case quant.BF16:
			st = safetensors.BF16
		case quant.FP8:
		default:
			return fmt.Errorf("hf %s: tensor %q: safetensors cannot hold %s weights (use f32, f16, bf16 or fp8)", dir, t.Name, t.Type)
		}
		name, err := HFName(t.Name, c.Config.Arch)
		if err != nil {
			return err
		}
		if t.Type == quant.FP8 {
			w, scale, err := fp8ToSafetensors(t, name)
			if err != nil {
				return fmt.Errorf("hf %s: %w", dir, err)
			}
			sts = append(sts, w, scale)
			continue
		}
		data, stream := t.Data, t.Write
		if gemmaNormShifted(c.Config.Arch, t.Name) {
			data, stream = nil, unshiftedWriter(t)
		}
		shape := t.Shape
		if strings.HasSuffix(t.Name, "ffn_gate_inp_shexp.weight") && len(shape) == 1 {
			shape = []int{1, shape[0]} // Qwen2-MoE's shared-expert gate, a Linear(hidden, 1)
		}
		sts = append(sts, safetensors.WriteTensor{Name: name, DType: st, Shape: shape, Data: data, Stream: stream})
	}
	meta := map[string]string{"format": "pt"}
	if maxShard > 0 {
		return safetensors.WriteSharded(dir, sts, meta, maxShard, progress)
	}
	return safetensors.Write(filepath.Join(dir, safetensors.SingleFileName), sts, meta, progress)
}
