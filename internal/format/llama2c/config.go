// Package llama2c reads and writes the checkpoint (.bin) and tokenizer (tokenizer.bin) files of
// Andrej Karpathy's llama2.c.
//
// A checkpoint is a header of seven little-endian int32 values followed by every weight as
// float32, in the fixed order of llama2.c's run.c. Open memory-maps the file and hands out each
// weight as a slice of the mapping, split per layer and named as GGUF names them
// ("blk.3.attn_q.weight"), with shapes outermost first.
package llama2c

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// HeaderSize is the size in bytes of a checkpoint header: seven int32 values.
const HeaderSize = 7 * 4

// maxDim bounds every header value; llama2.c stores them as int32.
const maxDim = math.MaxInt32

// Config holds the hyperparameters in a checkpoint header.
type Config struct {
	Dim       int // transformer width
	HiddenDim int // feed-forward width
	Layers    int
	Heads     int // query heads
	KVHeads   int // key/value heads
	VocabSize int // always positive here; the sign on disk is SharedClassifier
	SeqLen    int // maximum sequence length
	// SharedClassifier is true when the output projection reuses the token embedding
	// (a positive vocab_size on disk) and false when a separate classifier follows the
	// other weights (a negative vocab_size on disk).
	SharedClassifier bool
}

// HeadSize returns the width of one attention head, Dim / Heads.
func (c Config) HeadSize() int { return c.Dim / c.Heads }

// KVDim returns the width of the key and value projections, KVHeads * HeadSize.
func (c Config) KVDim() int { return c.KVHeads * c.HeadSize() }

// ParseConfig decodes and validates a checkpoint header from the first HeaderSize bytes of b.
func ParseConfig(b []byte) (Config, error) {
	if len(b) < HeaderSize {
		return Config{}, fmt.Errorf("header needs %d bytes, have %d", HeaderSize, len(b))
	}
	var v [7]int32
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	c := Config{
		Dim:              int(v[0]),
		HiddenDim:        int(v[1]),
		Layers:           int(v[2]),
		Heads:            int(v[3]),
		KVHeads:          int(v[4]),
		VocabSize:        int(v[5]),
		SeqLen:           int(v[6]),
		SharedClassifier: v[5] > 0,
	}
	if v[5] < 0 {
		if v[5] == math.MinInt32 {
			return Config{}, errors.New("vocab_size -2147483648 is out of range")
		}
		c.VocabSize = -c.VocabSize
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// AppendHeader appends the seven int32 header values of c to b.
func (c Config) AppendHeader(b []byte) []byte {
	vocab := c.VocabSize
	if !c.SharedClassifier {
		vocab = -vocab
	}
	for _, v := range []int{c.Dim, c.HiddenDim, c.Layers, c.Heads, c.KVHeads, vocab, c.SeqLen} {
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(v)))
	}
	return b
}

// Validate checks that the hyperparameters describe a model llama2.c can run: every value
// positive and within int32, heads dividing the width into heads of even size, and key/value
// heads dividing the query heads.
func (c Config) Validate() error {
	fields := []struct {
		name string
		v    int
	}{
		{"dim", c.Dim}, {"hidden_dim", c.HiddenDim}, {"n_layers", c.Layers},
		{"n_heads", c.Heads}, {"n_kv_heads", c.KVHeads}, {"vocab_size", c.VocabSize},
		{"seq_len", c.SeqLen},
	}
	for _, f := range fields {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("%s %d is out of range (1..%d)", f.name, f.v, maxDim)
		}
	}
	if c.Dim%c.Heads != 0 {
		return fmt.Errorf("n_heads %d does not divide dim %d", c.Heads, c.Dim)
	}
	if c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("n_kv_heads %d does not divide n_heads %d", c.KVHeads, c.Heads)
	}
	if c.HeadSize()%2 != 0 {
		return fmt.Errorf("head size %d (dim %d / n_heads %d) is odd; rotary embedding needs it even",
			c.HeadSize(), c.Dim, c.Heads)
	}
	return nil
}
