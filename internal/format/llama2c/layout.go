package llama2c

import (
	"errors"
	"fmt"
	"math"
)

// Entry locates one tensor inside a checkpoint file.
type Entry struct {
	// Name in GGUF naming, such as "blk.0.attn_q.weight".
	Name string
	// Shape lists dimensions outermost first: a linear layer mapping In to Out features has
	// Shape {Out, In}.
	Shape []int
	// Offset is the byte offset of the tensor from the start of the file.
	Offset int64
	// Size is the tensor's size in bytes (4 per float32 element).
	Size int64
}

// Layout describes where every tensor of a checkpoint lies.
type Layout struct {
	// Entries lists the tensors in file order. The rotary tables that llama2.c's old exporter
	// wrote (and run.c skips) are not listed.
	Entries []Entry
	// RopeOffset and RopeSize locate the skipped freq_cis_real and freq_cis_imag tables
	// (seq_len × head_size/2 float32 values each, real then imaginary).
	RopeOffset, RopeSize int64
	// FileSize is the exact size in bytes a file with this configuration has.
	FileSize int64
}

var errOverflow = errors.New("tensor sizes overflow")

// mul multiplies non-negative values, reporting overflow past math.MaxInt64 / 4 (so that a
// byte count derived from the product also fits).
func mul(vals ...int) (int64, error) {
	const limit = math.MaxInt64 / 4
	p := int64(1)
	for _, v := range vals {
		if v < 0 {
			return 0, errOverflow
		}
		if v != 0 && p > limit/int64(v) {
			return 0, errOverflow
		}
		p *= int64(v)
	}
	return p, nil
}

// layerTensor names one per-layer weight in file order, with its shape for one layer.
type layerTensor struct {
	name  string
	shape func(c Config) []int
}

// layerOrder lists the per-layer weights in file order; each is
// stored for all layers before the next begins.
var layerOrder = []layerTensor{
	{"attn_norm", func(c Config) []int { return []int{c.Dim} }},
	{"attn_q", func(c Config) []int { return []int{c.Heads * c.HeadSize(), c.Dim} }},
	{"attn_k", func(c Config) []int { return []int{c.KVDim(), c.Dim} }},
	{"attn_v", func(c Config) []int { return []int{c.KVDim(), c.Dim} }},
	{"attn_output", func(c Config) []int { return []int{c.Dim, c.Heads * c.HeadSize()} }},
	{"ffn_norm", func(c Config) []int { return []int{c.Dim} }},
	{"ffn_gate", func(c Config) []int { return []int{c.HiddenDim, c.Dim} }}, // w1
	{"ffn_down", func(c Config) []int { return []int{c.Dim, c.HiddenDim} }}, // w2
	{"ffn_up", func(c Config) []int { return []int{c.HiddenDim, c.Dim} }},   // w3
}

// NewLayout computes the position of every tensor for a valid configuration. It fails
// without allocating much when the sizes do not fit in 64 bits.
func NewLayout(c Config) (*Layout, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// Check the total size first so absurd headers fail before any allocation.
	total, err := fileSize(c)
	if err != nil {
		return nil, err
	}
	l := &Layout{Entries: make([]Entry, 0, 3+c.Layers*len(layerOrder)), FileSize: total}
	off := int64(HeaderSize)
	add := func(name string, shape []int) {
		n, _ := mul(shape...) // fileSize has proven these products fit
		l.Entries = append(l.Entries, Entry{Name: name, Shape: shape, Offset: off, Size: 4 * n})
		off += 4 * n
	}
	add("token_embd.weight", []int{c.VocabSize, c.Dim})
	for _, lt := range layerOrder {
		shape := lt.shape(c)
		for i := range c.Layers {
			add(fmt.Sprintf("blk.%d.%s.weight", i, lt.name), shape)
		}
	}
	add("output_norm.weight", []int{c.Dim})
	rope, _ := mul(2, c.SeqLen, c.HeadSize()/2)
	l.RopeOffset, l.RopeSize = off, 4*rope
	off += 4 * rope
	if !c.SharedClassifier {
		add("output.weight", []int{c.VocabSize, c.Dim})
	}
	if off != total {
		return nil, fmt.Errorf("internal error: layout ends at %d, expected %d", off, total)
	}
	return l, nil
}

// fileSize returns the exact size of a checkpoint with configuration c, or an error when it
// does not fit in 64 bits.
func fileSize(c Config) (int64, error) {
	hd, kv := c.HeadSize(), c.KVDim()
	parts := [][]int{
		{c.VocabSize, c.Dim},            // token embedding
		{c.Layers, c.Dim},               // rms_att
		{c.Layers, c.Dim, c.Heads * hd}, // wq
		{c.Layers, c.Dim, kv},           // wk
		{c.Layers, c.Dim, kv},           // wv
		{c.Layers, c.Heads * hd, c.Dim}, // wo
		{c.Layers, c.Dim},               // rms_ffn
		{c.Layers, c.HiddenDim, c.Dim},  // w1
		{c.Layers, c.Dim, c.HiddenDim},  // w2
		{c.Layers, c.HiddenDim, c.Dim},  // w3
		{c.Dim},                         // rms_final
		{2, c.SeqLen, hd / 2},           // freq_cis real and imaginary
	}
	if !c.SharedClassifier {
		parts = append(parts, []int{c.VocabSize, c.Dim})
	}
	const limit = math.MaxInt64 / 8
	var floats int64
	for _, p := range parts {
		n, err := mul(p...)
		if err != nil {
			return 0, fmt.Errorf("%w (dim %d, hidden_dim %d, n_layers %d, vocab_size %d)",
				err, c.Dim, c.HiddenDim, c.Layers, c.VocabSize)
		}
		if floats > limit-n {
			return 0, errOverflow
		}
		floats += n
	}
	return HeaderSize + 4*floats, nil
}
