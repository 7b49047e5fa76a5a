package format

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// Model is an opened model: hyperparameters, tensors in GGUF naming, and the tokenizer
// vocabulary and chat template that came with it. Its tensor data stays valid until Close.
type Model struct {
	Path   string
	Format string // "gguf", "safetensors" or "llama2c"
	Config Config
	// Tensors in file order; look one up by name with Tensor.
	Tensors []*Tensor
	byName  map[string]*Tensor
	// Vocab is the tokenizer vocabulary, or nil when the files carry none.
	Vocab *tokenizer.Vocab
	// ChatTemplate is the Jinja chat template, "" when absent.
	ChatTemplate string
	// Generation holds sampling defaults from generation_config.json, nil when absent.
	Generation *hfconfig.GenerationConfig
	// Metadata is the file's own key/value metadata, for display (long values abbreviated).
	Metadata map[string]any

	closers []io.Closer
}

// Options changes how Open finds a model's parts.
type Options struct {
	// Tokenizer names a separate tokenizer file: a llama2.c tokenizer (.bin) for a llama2.c
	// checkpoint, a tokenizer.json, or a GGUF whose vocabulary is used.
	Tokenizer string
}

// Open opens the model at path: a .gguf file, a llama2.c checkpoint (.bin), or a folder
// holding a Hugging Face model (config.json and safetensors).
func Open(path string, opt Options) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	var m *Model
	switch {
	case st.IsDir():
		m, err = openHF(path)
	case isGGUF(path):
		m, err = openGGUF(path)
	case strings.HasSuffix(path, ".bin"):
		m, err = openLlama2c(path, opt.Tokenizer)
	default:
		return nil, fmt.Errorf("open model %s: not a GGUF file, llama2.c checkpoint (.bin) or Hugging Face folder", path)
	}
	if err != nil {
		return nil, err
	}
	if opt.Tokenizer != "" && m.Format != "llama2c" {
		v, err := LoadVocab(opt.Tokenizer, m.Config.VocabSize)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.Vocab = v
	}
	return m, nil
}

// isGGUF reports whether the file starts with the GGUF magic.
func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "GGUF"
}

// Tensor returns the tensor with the given GGUF name.
func (m *Model) Tensor(name string) (*Tensor, bool) {
	t, ok := m.byName[name]
	return t, ok
}

// Close releases the model's file mappings; its tensors' data must not be used afterwards.
func (m *Model) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	m.closers = nil
	return errors.Join(errs...)
}

// ParamCount returns the number of weights in all tensors.
func (m *Model) ParamCount() int64 {
	var n int64
	for _, t := range m.Tensors {
		n += int64(t.Elements())
	}
	return n
}

// Bytes returns the size of all tensor data.
func (m *Model) Bytes() int64 {
	var n int64
	for _, t := range m.Tensors {
		n += int64(len(t.Data))
	}
	return n
}

// Name returns a short display name for the model: the file or folder name.
func (m *Model) Name() string { return filepath.Base(strings.TrimSuffix(m.Path, "/")) }

func (m *Model) addTensor(t *Tensor) {
	if m.byName == nil {
		m.byName = map[string]*Tensor{}
	}
	m.Tensors = append(m.Tensors, t)
	m.byName[t.Name] = t
}

// inferFromTensors completes and checks the Config against the tensors present: tied
// embeddings, q/k/v biases, vocabulary size, and every layer's weight shapes.
func (m *Model) inferFromTensors() error {
	c := &m.Config
	emb, ok := m.Tensor("token_embd.weight")
	if !ok {
		return fmt.Errorf("tensor token_embd.weight is missing")
	}
	if len(emb.Shape) != 2 {
		return fmt.Errorf("tensor token_embd.weight: shape %v, want 2 dimensions", emb.Shape)
	}
	if c.VocabSize == 0 {
		c.VocabSize = emb.Shape[0]
	}
	_, hasOutput := m.Tensor("output.weight")
	c.TiedEmbeddings = !hasOutput
	_, c.QKVBias = m.Tensor("blk.0.attn_q.bias")
	if _, ok := m.Tensor("blk.0.attn_q_norm.weight"); ok {
		c.QKNorm = true
	}
	if c.FFNDim == 0 {
		if t, ok := m.Tensor("blk.0.ffn_up.weight"); ok && len(t.Shape) == 2 {
			c.FFNDim = t.Shape[0]
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	want := map[string][]int{
		"token_embd.weight":  {c.VocabSize, c.Dim},
		"output_norm.weight": {c.Dim},
	}
	if hasOutput {
		want["output.weight"] = []int{c.VocabSize, c.Dim}
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		want[p+"attn_norm.weight"] = []int{c.Dim}
		want[p+"attn_q.weight"] = []int{q, c.Dim}
		want[p+"attn_k.weight"] = []int{kv, c.Dim}
		want[p+"attn_v.weight"] = []int{kv, c.Dim}
		want[p+"attn_output.weight"] = []int{c.Dim, q}
		want[p+"ffn_norm.weight"] = []int{c.Dim}
		if c.QKVBias {
			want[p+"attn_q.bias"] = []int{q}
			want[p+"attn_k.bias"] = []int{kv}
			want[p+"attn_v.bias"] = []int{kv}
		}
		if c.QKNorm {
			want[p+"attn_q_norm.weight"] = []int{c.HeadDim}
			want[p+"attn_k_norm.weight"] = []int{c.HeadDim}
		}
		if c.Experts == 0 {
			want[p+"ffn_gate.weight"] = []int{c.FFNDim, c.Dim}
			want[p+"ffn_up.weight"] = []int{c.FFNDim, c.Dim}
			want[p+"ffn_down.weight"] = []int{c.Dim, c.FFNDim}
		} else {
			want[p+"ffn_gate_inp.weight"] = []int{c.Experts, c.Dim}
		}
	}
	for name, shape := range want {
		t, ok := m.Tensor(name)
		if !ok {
			return fmt.Errorf("tensor %s is missing", name)
		}
		if !slices.Equal(t.Shape, shape) {
			return fmt.Errorf("tensor %s: shape %v, want %v", name, t.Shape, shape)
		}
	}
	for _, t := range m.Tensors {
		if !t.Type.Known() {
			return fmt.Errorf("tensor %s: unsupported type %s", t.Name, t.Type)
		}
		if err := t.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks that the hyperparameters describe a model kvasir can run.
func (c *Config) Validate() error {
	switch {
	case c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.VocabSize <= 0:
		return fmt.Errorf("config: dim %d, layers %d, heads %d, vocab %d must all be positive", c.Dim, c.Layers, c.Heads, c.VocabSize)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("config: %d kv heads do not divide %d heads", c.KVHeads, c.Heads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("config: head dim %d must be positive and even", c.HeadDim)
	case c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0:
		return fmt.Errorf("config: rope dim %d must be even and at most the head dim %d", c.RopeDim, c.HeadDim)
	case c.Experts == 0 && c.FFNDim <= 0:
		return fmt.Errorf("config: feed-forward size %d must be positive", c.FFNDim)
	case c.Experts > 0 && (c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts):
		return fmt.Errorf("config: %d experts used per token of %d", c.ExpertsUsed, c.Experts)
	case c.ContextLen < 0:
		return fmt.Errorf("config: context length %d", c.ContextLen)
	}
	return nil
}

// NewModel assembles a model held in memory (such as a synthesized one) and checks its
// tensors against cfg as Open does for files.
func NewModel(name string, cfg Config, tensors []*Tensor, vocab *tokenizer.Vocab, chatTemplate string) (*Model, error) {
	m := &Model{Path: name, Format: "memory", Config: cfg, Vocab: vocab, ChatTemplate: chatTemplate, Metadata: map[string]any{}}
	for _, t := range tensors {
		m.addTensor(t)
	}
	if t, ok := m.Tensor("rope_freqs.weight"); ok && m.Config.Scaling.Type == "" {
		m.Config.Scaling = inferLlama3Scaling(m.Config, t)
	}
	if err := m.inferFromTensors(); err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	return m, nil
}
