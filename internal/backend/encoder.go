package backend

import (
	"fmt"
	"math"
)

// PoolMode says how an encoder turns a sequence's hidden states into one vector.
type PoolMode int

const (
	// PoolMean averages the rows of the sequence (sentence-transformers' mean pooling).
	PoolMean PoolMode = iota
	// PoolCLS takes the first row (the [CLS] token's).
	PoolCLS
	// PoolLast takes the last row (the last token's: decoder-style embedding models).
	PoolLast
)

func (m PoolMode) String() string {
	switch m {
	case PoolCLS:
		return "cls"
	case PoolLast:
		return "last"
	}
	return "mean"
}

// EncoderOps is implemented by backends that run bidirectional encoders of the BERT family:
// one forward over whole sequences, no KV cache. The sequences of a step are StepMeta's
// (QueryStarts); a token's position is StepMeta.Positions and its segment (token type)
// StepMeta.TokenTypes.
type EncoderOps interface {
	// EncoderEmbedding writes row t of out ([tokens][dim], F32) as the sum of row Tokens[t]
	// of tokens, row Positions[t] of positions and row TokenTypes[t] of types (row 0 when
	// the step has no TokenTypes). positions or types may be nil: a model without them.
	EncoderEmbedding(out, tokens, positions, types Tensor, st Step) error
	// LayerNorm writes ((y - mean(y)) / sqrt(var(y) + eps)) * weight + bias to out row by
	// row, where y = x + add (add may be nil: y = x): the post-norm residual step of a BERT
	// block. out may be x or add.
	LayerNorm(out, x, add, weight, bias Tensor, eps float32) error
	// GELU computes out = x * Φ(x) element-wise (the exact, erf form); out may be x.
	GELU(out, x Tensor) error
	// BidirectionalAttention lets every token attend to every token of its own sequence:
	// q, k, v and out are [tokens][heads*headDim], scores are scaled by scale. maxBias > 0
	// adds ALiBi's symmetric bias to head h's scaled score between the sequence's i-th and
	// j-th tokens: -ALiBiSlopes(heads, maxBias)[h] * |i - j| (jina-bert-v2, maxBias 8);
	// 0 adds none.
	BidirectionalAttention(out, q, k, v Tensor, heads int, scale, maxBias float32, st Step) error
	// GELUGLU computes out = GELU(gate) * up element-wise with the exact (erf) GELU: the
	// gated MLP of jina-bert-v2; out may be gate or up.
	GELUGLU(out, gate, up Tensor) error
	// PoolRows reads one vector per sequence back into dst ([sequences][cols] of x): the
	// mean of the sequence's rows, its first or its last row. It is the step's last op and
	// its only host synchronisation.
	PoolRows(dst []float32, x Tensor, mode PoolMode, st Step) error
}

// MarshalText writes the mode's name ("mean", "cls", "last").
func (m PoolMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mode's name: "mean", "cls" or "last".
func (m *PoolMode) UnmarshalText(b []byte) error {
	for _, p := range []PoolMode{PoolMean, PoolCLS, PoolLast} {
		if string(b) == p.String() {
			*m = p
			return nil
		}
	}
	return fmt.Errorf("pooling %q: want mean, cls or last", b)
}

// ALiBiSlopes returns the slope of each of heads heads for ALiBi with maximum bias maxBias
// (Press et al.): with n the largest power of two not above heads, head h < n has slope
// 2^(-maxBias/n)^(h+1), and the heads beyond take the odd powers of 2^(-maxBias/2n) in
// turn, 2^(-maxBias/2n)^(2(h-n)+1), as the papers' reference code and llama.cpp do.
func ALiBiSlopes(heads int, maxBias float32) []float32 {
	n := 1
	for n*2 <= heads {
		n *= 2
	}
	m0 := math.Pow(2, -float64(maxBias)/float64(n))
	m1 := math.Pow(2, -float64(maxBias)/2/float64(n))
	out := make([]float32, heads)
	for h := range out {
		if h < n {
			out[h] = float32(math.Pow(m0, float64(h+1)))
		} else {
			out[h] = float32(math.Pow(m1, float64(2*(h-n)+1)))
		}
	}
	return out
}
