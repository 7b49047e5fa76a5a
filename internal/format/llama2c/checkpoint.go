package llama2c

import (
	"fmt"
	"os"

	"github.com/kvasir-llm/kvasir/internal/format/mmap"
)

// Tensor is one float32 weight of a checkpoint.
type Tensor struct {
	// Name in GGUF naming, such as "blk.0.attn_q.weight".
	Name string
	// Shape lists dimensions outermost first ({Out, In} for a linear layer).
	Shape []int
	// Data holds the little-endian float32 values, a slice of the file's read-only mapping
	// when the checkpoint was opened with Open. It must not be written to.
	Data []byte
}

// Checkpoint is a parsed llama2.c model file.
type Checkpoint struct {
	// Name is the file path (or the name given to Parse), used in error messages.
	Name   string
	Config Config
	// Tensors lists the weights in file order. Without a separate classifier there is no
	// "output.weight": the model reuses "token_embd.weight".
	Tensors []Tensor
	// Rope holds the rotary tables stored after output_norm.weight (freq_cis_real then
	// freq_cis_imag); run.c ignores them and so may callers.
	Rope []byte

	index map[string]int
	unmap func() error
}

// Open memory-maps the checkpoint at path and parses it. The tensors' data stay valid until
// Close.
func Open(path string) (*Checkpoint, error) {
	f, _, size, err := openHeader(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, unmap, err := mmap.File(f, size)
	if err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", path, err)
	}
	c, err := Parse(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	c.unmap = unmap
	return c, nil
}

// ReadConfig reads and checks the header of the checkpoint at path, and the file's size
// against it, without mapping the file or laying out its tensors: a caller can hold the
// counts against limits of its own before Open makes an entry per layer.
func ReadConfig(path string) (Config, error) {
	f, cfg, _, err := openHeader(path)
	if err != nil {
		return Config{}, err
	}
	f.Close()
	return cfg, nil
}

// openHeader opens the file at path and reads and checks its header before anything is
// mapped, so a wrong file fails cheaply; the caller closes the file.
func openHeader(path string) (*os.File, Config, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Config{}, 0, fmt.Errorf("llama2c: %w", err)
	}
	fail := func(err error) (*os.File, Config, int64, error) {
		f.Close()
		return nil, Config{}, 0, fmt.Errorf("llama2c %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	var hdr [HeaderSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return fail(fmt.Errorf("reading header (file is %d bytes): %w", st.Size(), err))
	}
	cfg, err := ParseConfig(hdr[:])
	if err != nil {
		return fail(err)
	}
	if err := checkSize(cfg, st.Size()); err != nil {
		return fail(err)
	}
	return f, cfg, st.Size(), nil
}

// checkSize compares a file's size with the size its header calls for.
func checkSize(cfg Config, size int64) error {
	want, err := fileSize(cfg)
	if err != nil {
		return err
	}
	if size != want {
		cls := "shared"
		if !cfg.SharedClassifier {
			cls = "separate"
		}
		return fmt.Errorf("file is %d bytes but its header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, "+
			"n_kv_heads %d, vocab_size %d, seq_len %d, %s classifier) calls for %d bytes",
			size, cfg.Dim, cfg.HiddenDim, cfg.Layers, cfg.Heads, cfg.KVHeads, cfg.VocabSize, cfg.SeqLen, cls, want)
	}
	return nil
}

// Parse parses a whole checkpoint held in data; name is used in error messages. The tensors'
// data are slices of data, not copies.
func Parse(name string, data []byte) (*Checkpoint, error) {
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", name, err)
	}
	if err := checkSize(cfg, int64(len(data))); err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", name, err)
	}
	lay, err := NewLayout(cfg)
	if err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", name, err)
	}
	c := &Checkpoint{
		Name:    name,
		Config:  cfg,
		Tensors: make([]Tensor, len(lay.Entries)),
		Rope:    data[lay.RopeOffset : lay.RopeOffset+lay.RopeSize : lay.RopeOffset+lay.RopeSize],
		index:   make(map[string]int, len(lay.Entries)),
	}
	for i, e := range lay.Entries {
		end := e.Offset + e.Size
		c.Tensors[i] = Tensor{Name: e.Name, Shape: e.Shape, Data: data[e.Offset:end:end]}
		c.index[e.Name] = i
	}
	return c, nil
}

// Tensor returns the tensor with the given GGUF name.
func (c *Checkpoint) Tensor(name string) (*Tensor, bool) {
	i, ok := c.index[name]
	if !ok {
		return nil, false
	}
	return &c.Tensors[i], true
}

// Close releases the file mapping. The tensors' data must not be used afterwards.
func (c *Checkpoint) Close() error {
	if c.unmap == nil {
		return nil
	}
	err := c.unmap()
	c.unmap = nil
	c.Tensors, c.Rope, c.index = nil, nil, nil
	if err != nil {
		return fmt.Errorf("llama2c %s: %w", c.Name, err)
	}
	return nil
}
