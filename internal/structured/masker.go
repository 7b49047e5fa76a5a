package structured

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Masker constrains one sequence's tokens to a compiled grammar: it implements
// sample.Masker. Its mask allows a token exactly when the token's bytes extend the output
// so far to a prefix of some string of the language; end-of-generation tokens exactly when
// the output is complete; when the grammar is complete and admits nothing more, only
// end-of-generation tokens. Special tokens are never allowed.
type Masker struct {
	g     *TokenGrammar
	c     *Compiled
	trie  *TokenTrie
	vocab Vocabulary
	m     *Matcher
	// lens holds the number of bytes of each accepted token (an end-of-generation token:
	// 0), for Rollback; ended is the number of accepted tokens up to and including an
	// end-of-generation token (0: none accepted).
	lens  []int
	ended int
	// last is the last token accepted (-1: none), the one jump-forward may retokenize.
	last int32
	w    *walker
}

// NewMasker returns a masker at the start of the output.
func (g *TokenGrammar) NewMasker() *Masker {
	return &Masker{g: g, c: g.c, trie: g.trie, vocab: g.vocab, m: g.c.NewMatcher(), last: -1}
}

// Accept feeds tokens in order; a token the grammar does not allow is an error (the state
// stays after the tokens before it).
func (k *Masker) Accept(tokens []int32) error {
	for _, tok := range tokens {
		if k.ended > 0 {
			return fmt.Errorf("structured: token %d after the end of the output", tok)
		}
		id := int(tok)
		if id < 0 || id >= k.trie.numTokens {
			return fmt.Errorf("structured: token %d out of the vocabulary", tok)
		}
		if k.vocab.IsEOG(id) {
			if !k.m.Accepting() {
				return fmt.Errorf("structured: end of generation (token %d) before the output is complete", tok)
			}
			k.lens = append(k.lens, 0)
			k.ended = len(k.lens)
			continue
		}
		if k.vocab.IsSpecial(id) {
			return fmt.Errorf("structured: special token %d inside the grammar", tok)
		}
		b := k.vocab.TokenBytes(id)
		for i, c := range b {
			if !k.m.AcceptByte(c) {
				k.m.Rollback(i)
				return fmt.Errorf("structured: token %d (%q) does not fit the grammar at byte %d of the output", tok, b, k.m.Len()+i)
			}
		}
		k.lens = append(k.lens, len(b))
		k.last = tok
	}
	return nil
}

// acceptText feeds text as one entry of the history (one Rollback forgets it) and reports
// whether the grammar allows it; when it does not, the state is as before.
func (k *Masker) acceptText(text []byte) bool {
	if k.ended > 0 {
		return false
	}
	for i, c := range text {
		if !k.m.AcceptByte(c) {
			k.m.Rollback(i)
			return false
		}
	}
	k.lens = append(k.lens, len(text))
	return true
}

// Rollback forgets the last n accepted tokens.
func (k *Masker) Rollback(n int) {
	for range n {
		last := len(k.lens) - 1
		if last+1 == k.ended {
			k.ended = 0
		}
		k.m.Rollback(k.lens[last])
		k.lens = k.lens[:last]
		k.last = -1 // not kept: jump-forward then leaves the tokens before alone
	}
}

// Clone returns an independent masker in the same state.
func (k *Masker) Clone() sample.Stateful {
	return &Masker{g: k.g, c: k.c, trie: k.trie, vocab: k.vocab, m: k.m.Clone(),
		lens: append([]int(nil), k.lens...), ended: k.ended, last: k.last}
}

// Mask returns the tokens allowed next. The mask is reused by the next call.
func (k *Masker) Mask() sample.Mask {
	if k.w == nil {
		k.w = newWalker(k.g)
	}
	mask := k.w.mask(k.m.sets, k.ended > 0)
	return mask
}

// Accepting reports whether the output so far is complete.
func (k *Masker) Accepting() bool { return k.m.Accepting() }

// Done reports whether the grammar admits no further byte.
func (k *Masker) Done() bool { return !k.m.CanContinue() }

var _ sample.Forcer = (*Masker)(nil)

// Forced returns the bytes the grammar forces next (at most max), for jump-forward: where
// the grammar admits exactly one continuation, as a fixed key or `": "`, those bytes can be
// appended without sampling. It returns nothing once an end-of-generation token was
// accepted.
func (k *Masker) Forced(max int) []byte {
	if k.ended > 0 {
		return nil
	}
	return k.m.Forced(max)
}
