package encoder

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// File is an opened encoder model: its Config, its tensors in GGUF naming and its
// tokenizer vocabulary. Tensor data stays valid until Close.
type File struct {
	Path    string
	Config  Config
	Tensors map[string]*format.Tensor
	Vocab   *tokenizer.Vocab // nil when the files carry none
	closer  io.Closer
}

// Close releases the file's mappings.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// Name returns the file or folder name.
func (f *File) Name() string { return filepath.Base(filepath.Clean(f.Path)) }

// encoderArchs are the GGUF architectures and Hugging Face classes this package runs.
var (
	ggufArchs = []string{ArchBERT, ArchNomic, ArchJina}
	hfArchs   = []string{"BertModel", "BertForSequenceClassification", "NomicBertModel", "JinaBertModel", "JinaBertForMaskedLM"}
)

// IsEncoder reports whether path holds an encoder this package opens: a GGUF file whose
// general.architecture is "bert", "nomic-bert" or "jina-bert-v2", or a Hugging Face folder
// whose config.json names a BERT class, NomicBertModel or a JinaBert class.
func IsEncoder(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	if st.IsDir() {
		h, err := readHFConfig(filepath.Join(path, "config.json"))
		return err == nil && slices.Contains(hfArchs, h.architecture())
	}
	f, err := gguf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return slices.Contains(ggufArchs, f.Architecture())
}

// Open opens the encoder at path: a GGUF file or a Hugging Face folder.
func Open(path string) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open encoder: %w", err)
	}
	var f *File
	if st.IsDir() {
		f, err = openHF(path)
	} else {
		f, err = openGGUF(path)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	if err := f.check(); err != nil {
		f.Close()
		return nil, fmt.Errorf("encoder %s: %w", path, err)
	}
	return f, nil
}

// openGGUF reads a llama.cpp "bert", "nomic-bert" or "jina-bert-v2" GGUF.
func openGGUF(path string) (*File, error) {
	g, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	f := &File{Path: path, Tensors: map[string]*format.Tensor{}, closer: g}
	arch := g.Architecture()
	if !slices.Contains(ggufArchs, arch) {
		return f, fmt.Errorf("gguf %s: general.architecture %q is not an encoder this build runs (want %v)", path, arch, ggufArchs)
	}
	for i := range g.Tensors {
		ti := &g.Tensors[i]
		data, err := g.TensorData(ti)
		if err != nil {
			return f, err
		}
		shape := make([]int, len(ti.Dims))
		for j, d := range ti.Dims {
			shape[len(ti.Dims)-1-j] = int(d)
		}
		f.Tensors[ti.Name] = &format.Tensor{Name: ti.Name, Type: ti.Type, Shape: shape, Data: data}
	}
	var errs []error
	count := func(key string) int {
		v, ok := g.Get(arch + "." + key)
		if !ok {
			return 0
		}
		n, ok := v.Int64()
		if !ok || n < 0 || n > math.MaxInt32 {
			errs = append(errs, fmt.Errorf("%s.%s: want a count", arch, key))
			return 0
		}
		return int(n)
	}
	c := &f.Config
	c.Arch = arch
	c.Dim = count("embedding_length")
	c.Layers = count("block_count")
	c.FFNDim = count("feed_forward_length")
	c.Heads = count("attention.head_count")
	c.MaxPositions = count("context_length")
	c.NormEps = 1e-12
	if v, ok := g.GetFloat64(arch + ".attention.layer_norm_epsilon"); ok {
		c.NormEps = v
	}
	switch arch {
	case ArchNomic:
		c.RopeTheta = 10000
		if v, ok := g.GetFloat64(arch + ".rope.freq_base"); ok {
			c.RopeTheta = v
		}
	case ArchJina:
		c.MaxALiBi = 8 // llama.cpp's and the model's own, not in the file
	}
	pooling := count("pooling_type")
	if err := errors.Join(errs...); err != nil {
		return f, fmt.Errorf("gguf %s: %w", path, err)
	}
	if err := f.splitQKV(); err != nil {
		return f, fmt.Errorf("gguf %s: %w", path, err)
	}
	f.inferFromTensors()
	// llama.cpp's pooling types: 0 none, 1 mean, 2 cls, 3 last, 4 rank (cls + classifier).
	switch pooling {
	case 0, 1:
		c.Pooling = backend.PoolMean
	case 2, 4:
		c.Pooling = backend.PoolCLS
	case 3:
		c.Pooling = backend.PoolLast
	default:
		return f, fmt.Errorf("gguf %s: %s.pooling_type %d: want 0 to 4", path, arch, pooling)
	}
	if c.Labels > 0 && pooling == 0 {
		c.Pooling = backend.PoolCLS
	}
	if _, ok := g.Get("tokenizer.ggml.model"); ok {
		if f.Vocab, err = format.LoadVocab(path, 0); err != nil {
			return f, err
		}
	}
	return f, nil
}

// splitQKV replaces each layer's fused blk.N.attn_qkv.weight ([3 dim][dim], nomic's) by
// attn_q, attn_k and attn_v views of its rows: a row-major matrix's rows lie one after
// another in any block format.
func (f *File) splitQKV() error {
	for l := 0; ; l++ {
		name := fmt.Sprintf("blk.%d.attn_qkv.weight", l)
		t, ok := f.Tensors[name]
		if !ok {
			return nil
		}
		if len(t.Shape) != 2 || t.Shape[0]%3 != 0 {
			return fmt.Errorf("tensor %s: shape %v, want [3 x hidden size][hidden size]", name, t.Shape)
		}
		if err := t.Check(); err != nil {
			return err
		}
		rows := t.Shape[0] / 3
		part := len(t.Data) / 3
		for i, s := range []string{"attn_q", "attn_k", "attn_v"} {
			n := fmt.Sprintf("blk.%d.%s.weight", l, s)
			f.Tensors[n] = &format.Tensor{Name: n, Type: t.Type, Shape: []int{rows, t.Shape[1]}, Data: t.Data[i*part : (i+1)*part : (i+1)*part]}
		}
		delete(f.Tensors, name)
	}
}

// splitGateUp replaces each layer's fused MLP matrix of jina-bert-v2 ([2 x intermediate
// size][hidden size]: blk.N.ffn_gate_up, the gate's rows first, or blk.N.ffn_up_gate, the up
// projection's first) by ffn_gate and ffn_up views of its rows.
func (f *File) splitGateUp() error {
	for name, t := range f.Tensors {
		layer, fused, ok := strings.Cut(strings.TrimPrefix(name, "blk."), ".")
		if !ok || (fused != "ffn_gate_up.weight" && fused != "ffn_up_gate.weight") {
			continue
		}
		if len(t.Shape) != 2 || t.Shape[0]%2 != 0 {
			return fmt.Errorf("tensor %s: shape %v, want [2 x intermediate size][hidden size]", name, t.Shape)
		}
		if err := t.Check(); err != nil {
			return err
		}
		parts := []string{"ffn_gate", "ffn_up"}
		if fused == "ffn_up_gate.weight" {
			parts[0], parts[1] = parts[1], parts[0]
		}
		half := len(t.Data) / 2
		for i, s := range parts {
			n := "blk." + layer + "." + s + ".weight"
			f.Tensors[n] = &format.Tensor{Name: n, Type: t.Type, Shape: []int{t.Shape[0] / 2, t.Shape[1]}, Data: t.Data[i*half : (i+1)*half : (i+1)*half]}
		}
		delete(f.Tensors, name)
	}
	return nil
}

// inferFromTensors fills what the tensors say: vocabulary, token types, the head, jina's
// optional norms.
func (f *File) inferFromTensors() {
	c := &f.Config
	_, c.QKNorm = f.Tensors["blk.0.attn_q_norm.weight"]
	_, c.AttnNorm2 = f.Tensors["blk.0.attn_norm_2.weight"]
	if t, ok := f.Tensors["token_embd.weight"]; ok && len(t.Shape) == 2 {
		c.VocabSize = t.Shape[0]
	}
	if t, ok := f.Tensors["token_types.weight"]; ok && len(t.Shape) == 2 {
		c.TypeVocab = t.Shape[0]
	}
	if t, ok := f.Tensors["cls.output.weight"]; ok && len(t.Shape) == 2 {
		c.Labels = t.Shape[0]
		_, c.Pooler = f.Tensors["cls.weight"]
	}
}

// hfConfig is the part of a BERT config.json the encoder reads.
type hfConfig struct {
	Architectures         []string          `json:"architectures"`
	VocabSize             int               `json:"vocab_size"`
	HiddenSize            int               `json:"hidden_size"`
	NumHiddenLayers       int               `json:"num_hidden_layers"`
	NumAttentionHeads     int               `json:"num_attention_heads"`
	IntermediateSize      int               `json:"intermediate_size"`
	MaxPositionEmbeddings int               `json:"max_position_embeddings"`
	TypeVocabSize         int               `json:"type_vocab_size"`
	LayerNormEps          float64           `json:"layer_norm_eps"`
	HiddenAct             string            `json:"hidden_act"`
	PositionEmbeddingType string            `json:"position_embedding_type"`
	FeedForwardType       string            `json:"feed_forward_type"` // jina-bert-v2's
	ID2Label              map[string]string `json:"id2label"`
	nomicConfig
}

// nomicConfig is the part of a NomicBertModel config.json (GPT-2's names) the encoder
// reads.
type nomicConfig struct {
	NEmbd                int             `json:"n_embd"`
	NLayer               int             `json:"n_layer"`
	NHead                int             `json:"n_head"`
	NInner               int             `json:"n_inner"`
	NPositions           int             `json:"n_positions"`
	MaxTrainedPositions  int             `json:"max_trained_positions"`
	LayerNormEpsilon     float64         `json:"layer_norm_epsilon"`
	ActivationFunction   string          `json:"activation_function"`
	RotaryEmbBase        float64         `json:"rotary_emb_base"`
	RotaryEmbFraction    *float64        `json:"rotary_emb_fraction"`
	RotaryEmbInterleaved bool            `json:"rotary_emb_interleaved"`
	RotaryScalingFactor  json.RawMessage `json:"rotary_scaling_factor"`
	QKVProjBias          *bool           `json:"qkv_proj_bias"`
	MLPFc1Bias           *bool           `json:"mlp_fc1_bias"`
	MLPFc2Bias           *bool           `json:"mlp_fc2_bias"`
	Prenorm              bool            `json:"prenorm"`
}

// check refuses the NomicBertModel variants the encoder does not run.
func (n *nomicConfig) check() error {
	isTrue := func(b *bool) bool { return b == nil || *b } // the model's defaults are true
	switch {
	case n.ActivationFunction != "swiglu":
		return fmt.Errorf("activation_function %q is not supported (want swiglu)", n.ActivationFunction)
	case isTrue(n.QKVProjBias) || isTrue(n.MLPFc1Bias) || isTrue(n.MLPFc2Bias):
		return fmt.Errorf("qkv_proj_bias, mlp_fc1_bias and mlp_fc2_bias must be false (biases are not supported)")
	case n.Prenorm:
		return fmt.Errorf("prenorm true is not supported (want the post-norm blocks)")
	case n.RotaryEmbFraction != nil && *n.RotaryEmbFraction != 1:
		return fmt.Errorf("rotary_emb_fraction %g is not supported (want 1)", *n.RotaryEmbFraction)
	case n.RotaryEmbInterleaved:
		return fmt.Errorf("rotary_emb_interleaved true is not supported")
	case len(n.RotaryScalingFactor) > 0 && string(n.RotaryScalingFactor) != "null":
		return fmt.Errorf("rotary_scaling_factor %s is not supported (want null)", n.RotaryScalingFactor)
	}
	return nil
}

func (h *hfConfig) architecture() string {
	if len(h.Architectures) == 0 {
		return ""
	}
	return h.Architectures[0]
}

func readHFConfig(path string) (*hfConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h hfConfig
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &h, nil
}

// hfPooling is sentence-transformers' 1_Pooling/config.json.
type hfPooling struct {
	CLS       bool `json:"pooling_mode_cls_token"`
	Mean      bool `json:"pooling_mode_mean_tokens"`
	Max       bool `json:"pooling_mode_max_tokens"`
	MeanSqrt  bool `json:"pooling_mode_mean_sqrt_len_tokens"`
	LastToken bool `json:"pooling_mode_lasttoken"`
}

// openHF reads a Hugging Face BERT, NomicBertModel or JinaBert folder.
func openHF(dir string) (*File, error) {
	h, err := readHFConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("hf %s: %w", dir, err)
	}
	if !slices.Contains(hfArchs, h.architecture()) {
		return nil, fmt.Errorf("hf %s: architecture %q is not an encoder this build runs (want %v)", dir, h.architecture(), hfArchs)
	}
	nomic := h.architecture() == "NomicBertModel"
	jina := strings.HasPrefix(h.architecture(), "JinaBert")
	position := "absolute"
	if jina {
		position = "alibi"
		if h.FeedForwardType != "geglu" {
			return nil, fmt.Errorf("hf %s: feed_forward_type %q is not supported (want geglu)", dir, h.FeedForwardType)
		}
	}
	if nomic {
		if err := h.nomicConfig.check(); err != nil {
			return nil, fmt.Errorf("hf %s: %w", dir, err)
		}
	} else if h.HiddenAct != "" && h.HiddenAct != "gelu" {
		return nil, fmt.Errorf("hf %s: hidden_act %q is not supported (want gelu)", dir, h.HiddenAct)
	}
	if p := h.PositionEmbeddingType; !nomic && p != position && (p != "" || jina) {
		return nil, fmt.Errorf("hf %s: position_embedding_type %q is not supported (want %s)", dir, p, position)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	f := &File{Path: dir, Tensors: map[string]*format.Tensor{}, closer: set}
	for _, hf := range set.Names() {
		ti, _ := set.Tensor(hf)
		name, ok := ggufName(hf)
		switch {
		case nomic:
			name, ok = nomicGGUFName(hf)
		case jina:
			name, ok = jinaGGUFName(hf)
		}
		if !ok {
			continue
		}
		t, ok := map[safetensors.DType]quant.Type{safetensors.F32: quant.F32, safetensors.F16: quant.F16, safetensors.BF16: quant.BF16}[ti.DType]
		if !ok {
			return f, fmt.Errorf("hf %s: tensor %q: dtype %s is not supported (want F32, F16 or BF16)", dir, hf, ti.DType)
		}
		f.Tensors[name] = &format.Tensor{Name: name, Type: t, Shape: ti.Shape, Data: ti.Data}
	}
	c := &f.Config
	*c = Config{Arch: ArchBERT, VocabSize: h.VocabSize, Dim: h.HiddenSize, Layers: h.NumHiddenLayers,
		Heads: h.NumAttentionHeads, FFNDim: h.IntermediateSize, MaxPositions: h.MaxPositionEmbeddings,
		NormEps: h.LayerNormEps, Pooling: backend.PoolCLS} // BERT's own pooling: the [CLS] token
	if nomic {
		n := &h.nomicConfig
		// The positions it was trained on (n_positions, 8192, assumes a RoPE scaling the
		// model's code applies only past them), as llama.cpp's converter takes 2048.
		*c = Config{Arch: ArchNomic, VocabSize: h.VocabSize, Dim: n.NEmbd, Layers: n.NLayer, Heads: n.NHead,
			FFNDim: n.NInner, MaxPositions: cmp.Or(n.MaxTrainedPositions, n.NPositions), NormEps: n.LayerNormEpsilon,
			RopeTheta: cmp.Or(n.RotaryEmbBase, 10000), Pooling: backend.PoolMean} // nomic-embed's pooling: mean
		if err := f.splitQKV(); err != nil {
			return f, fmt.Errorf("hf %s: %w", dir, err)
		}
	}
	if jina {
		c.Arch, c.MaxALiBi, c.Pooling = ArchJina, 8, backend.PoolMean // jina-embeddings-v2's pooling: mean
		if err := f.splitGateUp(); err != nil {
			return f, fmt.Errorf("hf %s: %w", dir, err)
		}
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-12
	}
	f.inferFromTensors()
	if p := filepath.Join(dir, "1_Pooling", "config.json"); fileExists(p) {
		if c.Pooling, err = ReadPooling(p); err != nil {
			return f, fmt.Errorf("hf %s: %w", dir, err)
		}
	}
	if tj := filepath.Join(dir, "tokenizer.json"); fileExists(tj) {
		if f.Vocab, err = format.LoadVocab(tj, 0); err != nil {
			return f, err
		}
		ggufWordPiece(f.Vocab)
	}
	return f, nil
}

// ggufWordPiece rewrites a WordPiece vocab read from tokenizer.json ("x" starts a word,
// "##x" continues one) into the GGUF form the WordPiece tokenizer matches ("▁x" starts a
// word, "x" continues one). A vocab already in GGUF form (some piece starts with "▁") is
// left as it is; special and added tokens keep their text.
func ggufWordPiece(v *tokenizer.Vocab) {
	if v.Model != "bert" {
		return
	}
	for id, t := range v.Tokens {
		if v.TypeOf(id) == tokenizer.TypeNormal && strings.HasPrefix(t, "▁") {
			return
		}
	}
	for id, t := range v.Tokens {
		if v.TypeOf(id) != tokenizer.TypeNormal {
			continue
		}
		if rest, ok := strings.CutPrefix(t, "##"); ok {
			v.Tokens[id] = rest
		} else {
			v.Tokens[id] = "▁" + t
		}
	}
}

// ReadPooling reads sentence-transformers' 1_Pooling/config.json: one of cls, mean and
// last token.
func ReadPooling(path string) (backend.PoolMode, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var p hfPooling
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case p.Max || p.MeanSqrt:
		return 0, fmt.Errorf("%s: max and mean-sqrt-len pooling are not supported (want cls, mean or lasttoken)", path)
	case p.CLS && !p.Mean && !p.LastToken:
		return backend.PoolCLS, nil
	case p.Mean && !p.CLS && !p.LastToken:
		return backend.PoolMean, nil
	case p.LastToken && !p.CLS && !p.Mean:
		return backend.PoolLast, nil
	}
	return 0, fmt.Errorf("%s: want exactly one of pooling_mode_cls_token, pooling_mode_mean_tokens, pooling_mode_lasttoken", path)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// check holds every tensor the Config calls for to its shape.
func (f *File) check() error {
	c := &f.Config
	if err := c.check(); err != nil {
		return err
	}
	if f.Vocab != nil && len(f.Vocab.Tokens) > c.VocabSize {
		return fmt.Errorf("tokenizer: %d tokens, more than the %d rows of token_embd.weight", len(f.Vocab.Tokens), c.VocabSize)
	}
	wants := tensorShapes(*c, false)
	for _, w := range wants {
		t, ok := f.Tensors[w.name]
		if !ok {
			return fmt.Errorf("tensor %s is missing", w.name)
		}
		if !slices.Equal(t.Shape, w.shape) {
			return fmt.Errorf("tensor %s: shape %v, want %v", w.name, t.Shape, w.shape)
		}
		if !t.Type.Known() {
			return fmt.Errorf("tensor %s: unsupported type %s", w.name, t.Type)
		}
		if err := t.Check(); err != nil {
			return err
		}
	}
	return nil
}
