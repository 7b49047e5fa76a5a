package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// activations are the tensors one step computes in, [tokens][row length] each.
type activations struct {
	x      backend.Tensor // the residual stream [tokens][Dim]
	xb     backend.Tensor // its normalized form
	ffnOut backend.Tensor // a block's output, added to x by the next fused norm
	q, att backend.Tensor // [tokens][Heads*HeadDim]
	k, v   backend.Tensor // [tokens][KVHeads*HeadDim]
	// The feed-forward's hidden rows [tokens][FFNDim] (the shared expert's, in a mixture
	// of experts).
	gate, up backend.Tensor
	// Mixture of experts: router logits [tokens][Experts], each token's experts and their
	// gains [tokens][ExpertsUsed], the shared expert's output [tokens][Dim].
	router, expertIDs, expertGains, shared backend.Tensor
	// The shared expert's hidden rows [tokens][SharedExpertFFN] when the model also has
	// dense layers (whose rows gate and up hold); nil otherwise (gate and up serve).
	sharedGate, sharedUp backend.Tensor
	// last holds the rows whose logits the step returns [logits rows][Dim].
	last backend.Tensor
	// qSq and kSq hold each token's summed squares of q and k [tokens][1], all-reduced
	// across the tensor-parallel ranks (a QK norm over the whole projection, split); kSq
	// also the latent's of multi-head latent attention.
	qSq, kSq backend.Tensor
	// qLat holds the query's low-rank projection of multi-head latent attention
	// [tokens][QLoRARank].
	qLat backend.Tensor
	// loraU holds each token's adapter down-projections A·x [tokens][max rank], one block
	// of max rank columns per projection of a LoRA group (with LoRA enabled).
	loraU backend.Tensor
	// lowRank holds a factorized matrix's intermediate x·Aᵀ [tokens][rank], one buffer per
	// distinct rank of the model's (weights.ranks, in that order).
	lowRank []backend.Tensor
}

// buffer describes one tensor of activations: where it is, its element type and row
// length, and whether it has a row per logits row rather than per token.
type buffer struct {
	t         *backend.Tensor
	dtype     quant.Type
	cols      int
	perLogits bool
}

// buffers lists the tensors of a that shard s uses.
func buffers(a *activations, s *shard) []buffer {
	c := s.cfg
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	bs := []buffer{
		{t: &a.x, dtype: quant.F32, cols: c.Dim}, {t: &a.xb, dtype: quant.F32, cols: c.Dim},
		{t: &a.ffnOut, dtype: quant.F32, cols: c.Dim},
		{t: &a.q, dtype: quant.F32, cols: q}, {t: &a.att, dtype: quant.F32, cols: q},
		{t: &a.k, dtype: quant.F32, cols: kv}, {t: &a.v, dtype: quant.F32, cols: kv},
		{t: &a.last, dtype: quant.F32, cols: c.Dim, perLogits: true},
	}
	if s.lora != nil {
		bs = append(bs, buffer{t: &a.loraU, dtype: quant.F32, cols: s.lora.maxRank * s.loraGroupMax()})
	}
	ffn := c.FFNDim
	if c.Experts > 0 {
		ffn = c.SharedExpertFFN
		if c.LeadingDenseLayers > 0 {
			ffn = c.FFNDim
			if s := c.SharedExpertFFN; s > 0 {
				bs = append(bs, buffer{t: &a.sharedGate, dtype: quant.F32, cols: s}, buffer{t: &a.sharedUp, dtype: quant.F32, cols: s})
			}
		}
		bs = append(bs, buffer{t: &a.router, dtype: quant.F32, cols: c.Experts},
			buffer{t: &a.expertIDs, dtype: quant.I32, cols: c.ExpertsUsed},
			buffer{t: &a.expertGains, dtype: quant.F32, cols: c.ExpertsUsed})
		if ffn > 0 {
			bs = append(bs, buffer{t: &a.shared, dtype: quant.F32, cols: c.Dim})
		}
	}
	if ffn > 0 {
		bs = append(bs, buffer{t: &a.gate, dtype: quant.F32, cols: ffn}, buffer{t: &a.up, dtype: quant.F32, cols: ffn})
	}
	if c.QKNormFull && s.tp != nil {
		bs = append(bs, buffer{t: &a.qSq, dtype: quant.F32, cols: 1}, buffer{t: &a.kSq, dtype: quant.F32, cols: 1})
	}
	if c.MLA() {
		bs = append(bs, buffer{t: &a.kSq, dtype: quant.F32, cols: 1})
		if c.QLoRARank > 0 {
			bs = append(bs, buffer{t: &a.qLat, dtype: quant.F32, cols: c.QLoRARank})
		}
	}
	if s.w != nil && len(s.w.ranks) > 0 {
		ranks := s.w.ranks
		if len(a.lowRank) != len(ranks) {
			a.lowRank = make([]backend.Tensor, len(ranks))
		}
		for i, r := range ranks {
			bs = append(bs, buffer{t: &a.lowRank[i], dtype: quant.F32, cols: r})
		}
	}
	return bs
}

// stepBuffers holds a shard's activations, allocated on the backend for the largest step
// seen so far (rounded up to powers of two), and views of them at the current step's size.
// Steps of one size reuse the same views, so they run the same ops on the same tensors.
// Growing frees the old tensors, which makes a device drop every step graph it captured
// (they hold the old addresses): the rounding keeps that to a few times in a server's life
// even as its steps grow token by token (speculative verification adds logits rows a few
// at a time).
type stepBuffers struct {
	full                 activations
	tokens, rows         int // the capacity of full: tokens and logits rows
	current              activations
	viewTokens, viewRows int // the step size current was made for
}

// forStep returns the activations for a step of n tokens and rows logits rows, growing the
// buffers first when the step is larger than any before (inside Run).
func (s *stepBuffers) forStep(sh *shard, n, rows int) (*activations, error) {
	if n == s.viewTokens && rows == s.viewRows {
		return &s.current, nil
	}
	if n > s.tokens || rows > s.rows {
		tokens := max(s.tokens, ceilPow2(n))
		if err := s.grow(sh, tokens, max(s.rows, min(ceilPow2(max(rows, 1)), tokens))); err != nil {
			return nil, err
		}
	}
	full, view := buffers(&s.full, sh), buffers(&s.current, sh)
	for i, b := range full {
		k := n
		if b.perLogits {
			k = rows
		}
		*view[i].t = nil
		if k > 0 {
			*view[i].t = (*b.t).Rows(k)
		}
	}
	s.viewTokens, s.viewRows = n, rows
	return &s.current, nil
}

// grow replaces the buffers with ones of tokens rows (rows for the logits rows).
func (s *stepBuffers) grow(sh *shard, tokens, rows int) error {
	for _, b := range buffers(&s.full, sh) {
		if *b.t != nil {
			if err := sh.be.Free(*b.t); err != nil {
				return err
			}
			*b.t = nil
		}
	}
	s.tokens, s.rows, s.viewTokens, s.viewRows = 0, 0, 0, 0
	for _, b := range buffers(&s.full, sh) {
		k := tokens
		if b.perLogits {
			k = rows
		}
		t, err := sh.be.NewTensor(b.dtype, k, b.cols)
		if err != nil {
			return fmt.Errorf("activations: %w", err)
		}
		*b.t = t
	}
	s.tokens, s.rows = tokens, rows
	return nil
}

// ceilPow2 returns the least power of two at least n (n >= 1).
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
