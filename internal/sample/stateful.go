package sample

import (
	"fmt"
	"math"
	"math/bits"
)

// Stateful is a per-sequence logits processor whose effect depends on the tokens the
// sequence has generated so far (penalties, a grammar). The engine tells it every token it
// accepts and, when it takes tokens back (speculative tokens the model rejected), how many
// to forget; a processor that restricts the next token also implements Masker.
//
// A Stateful belongs to one sequence and is used from the engine loop only.
type Stateful interface {
	// Accept records tokens appended to the sequence's output, in order. An error means a
	// token the processor cannot take (one its mask did not allow): the engine ends the
	// sequence with that error.
	Accept(tokens []int32) error
	// Rollback forgets the last n accepted tokens (n at most the number accepted).
	Rollback(n int)
	// Clone returns an independent copy in the same state, for a sequence forked from this
	// one (parallel sampling, beam search).
	Clone() Stateful
}

// Masker is a Stateful that restricts which token may come next.
type Masker interface {
	Stateful
	// Mask returns the tokens allowed next as a vocabulary mask (see Mask), or nil when
	// every token is allowed. The slice is read before the next Accept or Rollback and
	// not kept; the processor may reuse it.
	Mask() Mask
}

// Mask is a set of token ids as a bitmask: token t is in the set when bit t%32 of word t/32
// is set. A mask for a vocabulary of n tokens has MaskWords(n) words; bits past n are
// ignored. It is the form device samplers take (backend.SampleRow.Mask).
type Mask []uint32

// MaskWords returns the number of words of a mask over a vocabulary of n tokens.
func MaskWords(n int) int { return (n + 31) / 32 }

// NewMask returns a mask over n tokens allowing every id in ids (ids outside [0, n) are
// ignored).
func NewMask(n int, ids ...int32) Mask {
	m := make(Mask, MaskWords(n))
	for _, id := range ids {
		if id >= 0 && int(id) < n {
			m.Set(id)
		}
	}
	return m
}

// Set adds token id to the mask.
func (m Mask) Set(id int32) { m[id/32] |= 1 << (uint(id) % 32) }

// Allows reports whether token id is in the mask (false outside its words).
func (m Mask) Allows(id int32) bool {
	w := int(id) / 32
	return id >= 0 && w < len(m) && m[w]&(1<<(uint(id)%32)) != 0
}

// Count returns the number of tokens of a vocabulary of n the mask allows.
func (m Mask) Count(n int) int {
	c := 0
	for w, word := range m {
		if rest := n - 32*w; rest <= 0 {
			break
		} else if rest < 32 {
			word &= 1<<uint(rest) - 1
		}
		c += bits.OnesCount32(word)
	}
	return c
}

// And intersects m with o in place (o nil: no change); the masks must have the same length.
func (m Mask) And(o Mask) {
	if o == nil {
		return
	}
	for i := range m {
		m[i] &= o[i]
	}
}

// Apply sets the logit of every token the mask does not allow to -Inf, so that no sampler
// can choose it (a nil mask changes nothing).
func (m Mask) Apply(logits []float32) {
	if m == nil {
		return
	}
	inf := float32(math.Inf(-1))
	for i := range logits {
		if !m.Allows(int32(i)) {
			logits[i] = inf
		}
	}
}

// CheckLen reports whether m fits a vocabulary of n tokens.
func (m Mask) CheckLen(n int) error {
	if m != nil && len(m) != MaskWords(n) {
		return fmt.Errorf("sample: mask of %d words for a vocabulary of %d tokens (want %d)", len(m), n, MaskWords(n))
	}
	return nil
}

// Forcer is a Masker that can say which tokens must follow (jump-forward of structured
// output): where its grammar admits exactly one continuation, the engine appends those
// tokens without sampling them, computing them all in one step.
type Forcer interface {
	Masker
	// JumpForward returns the tokens forced after the tokens accepted so far, at most
	// grow more than are accepted now, tokenized as the tokenizer would tokenize that
	// text. When the forced bytes merge with the last accepted token, replace is 1: that
	// token is to be taken back (Rollback(1)) and tokens, which begin with its bytes,
	// accepted in its place; else replace is 0. It changes nothing itself; nil tokens:
	// nothing to jump.
	JumpForward(grow int) (replace int, tokens []int32)
}
