// Package encoder runs bidirectional transformer encoders of the BERT family (bge, e5,
// MiniLM, BERT cross-encoders, nomic-embed, jina-embeddings-v2) for embeddings and
// relevance scores, on any backend that implements backend.EncoderOps.
//
// A BERT encoder is the transformer without its causal mask: token, position and segment
// (token type) embeddings summed and layer-normalized, then blocks of bidirectional
// self-attention and a GELU MLP, each followed by a residual add and a LayerNorm (post-norm).
// Two variants share the graph: nomic-bert has no position table but rotates q and k
// (RoPE, NeoX style), fuses q, k and v in one matrix (split at open) and gates its MLP
// with SiLU (SwiGLU); jina-bert-v2 has no position table but biases attention by ALiBi,
// gates its MLP with GELU (GEGLU) and may add LayerNorms on q and k and a second one after
// attention.
// One forward runs whole sequences at once and needs no KV cache. The hidden states of a
// sequence are pooled into one vector (mean, [CLS] or last token); a cross-encoder adds a
// classification head on the pooled vector that turns a (query, document) pair into a
// relevance logit.
//
// Files: GGUF (general.architecture "bert", "nomic-bert" or "jina-bert-v2", llama.cpp's
// tensor names) and Hugging Face folders (BertModel, BertForSequenceClassification,
// NomicBertModel, JinaBertModel, with sentence-transformers' 1_Pooling/config.json).
// Weights keep kvasir's GGUF naming inside (names.go); fused matrices (nomic's qkv, jina's
// gate and up) are split into views of their rows at open.
package encoder

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// Config holds the hyperparameters of a BERT-family encoder.
type Config struct {
	Arch         string // "bert", "nomic-bert" or "jina-bert-v2"
	VocabSize    int
	Dim          int // hidden size
	Layers       int
	Heads        int
	FFNDim       int // intermediate size
	MaxPositions int // the longest sequence (bert: the position embedding's rows)
	TypeVocab    int // rows of the token type embedding (0: none)
	NormEps      float64
	// RopeTheta is nomic-bert's rotary base (q and k rotated NeoX style over the whole head).
	RopeTheta float64
	// MaxALiBi is jina-bert-v2's ALiBi maximum bias (8).
	MaxALiBi float32
	// QKNorm (jina-bert-v2): q and k are layer-normalized after their projections
	// (blk.N.attn_{q,k}_norm); AttnNorm2: a second residual add and LayerNorm follows the
	// attention's (blk.N.attn_norm_2).
	QKNorm, AttnNorm2 bool
	// Pooling is how a sequence's hidden states become its embedding.
	Pooling backend.PoolMode
	// Labels is the classifier head's output count (0: no head, an embedding model).
	Labels int
	// Pooler says the head starts with BERT's pooler: tanh(dense(pooled)) before the
	// classifier.
	Pooler bool
}

// Architectures of the package: GGUF general.architecture values.
const (
	ArchBERT  = "bert"
	ArchNomic = "nomic-bert"
	ArchJina  = "jina-bert-v2"
)

// gated reports whether the MLP is gated (down(act(gate) * up)): nomic's and jina's.
func (c *Config) gated() bool { return c.Arch == ArchNomic || c.Arch == ArchJina }

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
	case c.Arch != ArchBERT && c.Arch != ArchNomic && c.Arch != ArchJina:
		return fmt.Errorf("config: architecture %q: want %s, %s or %s", c.Arch, ArchBERT, ArchNomic, ArchJina)
	case c.Arch == ArchNomic && (c.RopeTheta <= 0 || c.HeadDim()%2 != 0):
		return fmt.Errorf("config: nomic-bert with rope base %g and heads of %d: want a base > 0 and even heads", c.RopeTheta, c.HeadDim())
	case c.Arch == ArchJina && c.MaxALiBi <= 0:
		return fmt.Errorf("config: jina-bert-v2 with ALiBi maximum bias %g: want > 0", c.MaxALiBi)
	case c.Labels > 0 && c.Arch != ArchBERT:
		return fmt.Errorf("config: a classifier head on %s: only bert cross-encoders are run", c.Arch)
	}
	return nil
}

// ParsePooling reads a pooling name: "mean", "cls" or "last".
func ParsePooling(s string) (backend.PoolMode, error) {
	var m backend.PoolMode
	err := m.UnmarshalText([]byte(s))
	return m, err
}
