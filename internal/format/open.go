package format

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

	names   fieldNames // how the files name the Config's fields, for errors
	closers []io.Closer
}

// Options changes how Open finds a model's parts and what it accepts.
type Options struct {
	// Tokenizer names a separate tokenizer file: a llama2.c tokenizer (.bin) for a llama2.c
	// checkpoint, a tokenizer.json, or a GGUF whose vocabulary is used.
	Tokenizer string
	// Limits bounds the counts a model's header may declare (zero fields: DefaultLimits).
	Limits Limits
}

// Open opens the model at path: a .gguf file, a llama2.c checkpoint (.bin), or a folder
// holding a Hugging Face model (config.json and safetensors). Every count its header
// declares is checked against opt.Limits and against the tensors present before anything
// is done per declared item, so a hostile header is refused at once.
func Open(path string, opt Options) (*Model, error) {
	m, err := Inspect(path, opt)
	if err != nil {
		if m != nil {
			m.Close()
		}
		return nil, err
	}
	return m, nil
}

// Inspect opens the model at path as Open does, but also returns a model that Open
// refuses for what its header declares (counts beyond the limits or disagreeing with the
// tensors): then the Model holds the metadata, the Config as declared and whatever tensors
// and vocabulary could be read without allocating per declared item, and the error says
// why Open refuses it. The Model is nil when the files cannot be read at all. The caller
// closes a non-nil Model.
func Inspect(path string, opt Options) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	var m *Model
	switch {
	case st.IsDir():
		m, err = openHF(path, opt.Limits)
	case isGGUF(path):
		m, err = openGGUF(path, opt.Limits)
	case strings.HasSuffix(path, ".bin"):
		m, err = openLlama2c(path, opt.Tokenizer, opt.Limits)
	default:
		return nil, fmt.Errorf("open model %s: not a GGUF file, llama2.c checkpoint (.bin) or Hugging Face folder", path)
	}
	if err != nil || opt.Tokenizer == "" || m.Format == "llama2c" {
		return m, err
	}
	v, err := LoadVocab(opt.Tokenizer, m.Config.VocabSize)
	if err != nil {
		return m, err
	}
	m.Vocab = v
	if err := m.checkVocab(); err != nil {
		return m, fmt.Errorf("model %s with tokenizer %s: %w", path, opt.Tokenizer, err)
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

// WithTensors returns a model like m (its config, vocabulary, template and name) holding
// tensors instead of m's: what a tool that re-encodes weights (kvasir quantize) hands to
// Convert. The copy owns no file mappings; m must stay open while it is used.
func (m *Model) WithTensors(tensors []*Tensor) *Model {
	c := &Model{Path: m.Path, Format: m.Format, Config: m.Config, Vocab: m.Vocab, ChatTemplate: m.ChatTemplate,
		Generation: m.Generation, Metadata: m.Metadata, names: m.names}
	for _, t := range tensors {
		c.addTensor(t)
	}
	return c
}

func (m *Model) addTensor(t *Tensor) {
	if m.byName == nil {
		m.byName = map[string]*Tensor{}
	}
	m.Tensors = append(m.Tensors, t)
	m.byName[t.Name] = t
}

// NewModel assembles a model held in memory (such as a synthesized one) and checks its
// tensors against cfg as Open does for files.
func NewModel(name string, cfg Config, tensors []*Tensor, vocab *tokenizer.Vocab, chatTemplate string) (*Model, error) {
	m := &Model{Path: name, Format: "memory", Config: cfg, Vocab: vocab, ChatTemplate: chatTemplate, Metadata: map[string]any{}, names: configNames}
	for _, t := range tensors {
		m.addTensor(t)
	}
	if t, ok := m.Tensor("rope_freqs.weight"); ok && m.Config.Scaling.Type == "" {
		m.Config.Scaling = inferLlama3Scaling(m.Config, t)
	}
	if err := m.inferFromTensors(DefaultLimits); err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	return m, nil
}
