// Package encoder runs bidirectional transformer encoders of the BERT family (bge, e5,
// MiniLM, BERT cross-encoders) for embeddings and relevance scores, on any backend that
// implements backend.EncoderOps.
//
// A BERT encoder is the transformer without its causal mask: token, position and segment
// (token type) embeddings summed and layer-normalized, then blocks of bidirectional
// self-attention and a GELU MLP, each followed by a residual add and a LayerNorm (post-norm).
// One forward runs whole sequences at once and needs no KV cache. The hidden states of a
// sequence are pooled into one vector (mean, [CLS] or last token); a cross-encoder adds a
// classification head on the pooled vector that turns a (query, document) pair into a
// relevance logit.
//
// Files: GGUF (general.architecture "bert", llama.cpp's tensor names) and Hugging Face
// folders (BertModel, BertForSequenceClassification, with sentence-transformers'
// 1_Pooling/config.json). Weights keep kvasir's GGUF naming inside (names.go).
package encoder

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// Config holds the hyperparameters of a BERT-family encoder.
type Config struct {
	Arch         string // "bert"
	VocabSize    int
	Dim          int // hidden size
	Layers       int
	Heads        int
	FFNDim       int // intermediate size
	MaxPositions int // rows of the position embedding: the longest sequence
	TypeVocab    int // rows of the token type embedding (0: none)
	NormEps      float64
	// Pooling is how a sequence's hidden states become its embedding.
	Pooling backend.PoolMode
	// Labels is the classifier head's output count (0: no head, an embedding model).
	Labels int
	// Pooler says the head starts with BERT's pooler: tanh(dense(pooled)) before the
	// classifier.
	Pooler bool
}

// HeadDim returns the size of one attention head.
func (c *Config) HeadDim() int { return c.Dim / c.Heads }

// check refuses a Config the encoder cannot run.
func (c *Config) check() error {
	switch {
	case c.VocabSize <= 0 || c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.FFNDim <= 0:
		return fmt.Errorf("config: vocabulary %d, hidden size %d, %d layers, %d heads, intermediate size %d: want all positive",
			c.VocabSize, c.Dim, c.Layers, c.Heads, c.FFNDim)
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("config: hidden size %d is not a multiple of the %d heads", c.Dim, c.Heads)
	case c.MaxPositions <= 0:
		return fmt.Errorf("config: max positions %d: want at least 1", c.MaxPositions)
	case c.Layers > 1024 || c.Dim > 1<<16 || c.FFNDim > 1<<18 || c.Heads > 1024:
		return fmt.Errorf("config: %d layers, hidden size %d, %d heads, intermediate size %d: beyond any encoder", c.Layers, c.Dim, c.Heads, c.FFNDim)
	case c.NormEps <= 0:
		return fmt.Errorf("config: layer norm epsilon %g: want > 0", c.NormEps)
	}
	return nil
}

// ParsePooling reads a pooling name: "mean", "cls" or "last".
func ParsePooling(s string) (backend.PoolMode, error) {
	var m backend.PoolMode
	err := m.UnmarshalText([]byte(s))
	return m, err
}
