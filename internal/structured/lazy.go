package structured

import (
	"bytes"
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Lazy is a grammar that waits for a trigger (llama.cpp's "lazy grammar"): the output is
// free until it contains one of the triggers, and from the first one on, the trigger
// included, it is held to the grammar, whose strings must begin with a trigger. It is what
// tool_choice "auto" needs: a reply may be text, but a tool call, once begun, must parse,
// its arguments an instance of the tool's schema.
//
// The grammar takes over only at a token that completes a trigger and whose bytes after
// the trigger the grammar allows; a token that completes a trigger with bytes the grammar
// refuses leaves the output free (the model wrote the trigger as text, not as a call). Lazy
// implements sample.Forcer: free, it forces nothing and its mask allows every token.
type Lazy struct {
	g        *TokenGrammar
	triggers [][]byte
	// text holds the output's bytes while free and lens the bytes of each token accepted
	// then (0 for an end-of-generation token), for Rollback.
	text []byte
	lens []int
	// inner holds the output to the grammar from the trigger on (nil while free); its
	// first entry is the text from the trigger to the end of the token that completed it.
	inner *Masker
}

// NewLazy returns a lazy grammar at the start of the output, waiting for triggers (at
// least one, none empty).
func (g *TokenGrammar) NewLazy(triggers []string) (*Lazy, error) {
	if len(triggers) == 0 {
		return nil, fmt.Errorf("structured: a lazy grammar needs at least one trigger")
	}
	z := &Lazy{g: g}
	for _, t := range triggers {
		if t == "" {
			return nil, fmt.Errorf("structured: a lazy grammar's trigger is empty")
		}
		if !g.c.NewMatcher().AcceptString(t) {
			return nil, fmt.Errorf("structured: the grammar's strings do not begin with the trigger %q", t)
		}
		z.triggers = append(z.triggers, []byte(t))
	}
	return z, nil
}

// Triggered reports whether the grammar has taken over.
func (z *Lazy) Triggered() bool { return z.inner != nil }

// Accept feeds tokens in order: free, any token; once triggered, what the grammar allows
// (an error otherwise, the state then after the tokens before it).
func (z *Lazy) Accept(tokens []int32) error {
	for i, tok := range tokens {
		if z.inner != nil {
			if err := z.inner.Accept(tokens[i : i+1]); err != nil {
				return err
			}
			continue
		}
		id := int(tok)
		if id < 0 || id >= z.g.trie.numTokens {
			return fmt.Errorf("structured: token %d out of the vocabulary", tok)
		}
		var b []byte
		if !z.g.vocab.IsEOG(id) {
			b = z.g.vocab.TokenBytes(id)
		}
		start := len(z.text)
		z.text = append(z.text, b...)
		z.lens = append(z.lens, len(b))
		if at := z.triggerEndingIn(start); at >= 0 {
			m := z.g.NewMasker()
			if m.acceptText(z.text[at:]) {
				z.inner = m
			}
		}
	}
	return nil
}

// triggerEndingIn returns where the first trigger that ends at or after byte from of the
// text begins (-1: none), so a trigger is found once, at the token that completes it.
func (z *Lazy) triggerEndingIn(from int) int {
	best := -1
	for _, t := range z.triggers {
		lo := max(0, from-len(t)+1)
		if i := bytes.Index(z.text[lo:], t); i >= 0 && (best < 0 || lo+i < best) {
			best = lo + i
		}
	}
	return best
}

// Rollback forgets the last n accepted tokens, back past the trigger if need be.
func (z *Lazy) Rollback(n int) {
	for range n {
		if z.inner != nil {
			if len(z.inner.lens) > 1 {
				z.inner.Rollback(1)
				continue
			}
			z.inner = nil // back to the token that completed the trigger: free again
		}
		last := len(z.lens) - 1
		z.text = z.text[:len(z.text)-z.lens[last]]
		z.lens = z.lens[:last]
	}
}

// Clone returns an independent copy in the same state.
func (z *Lazy) Clone() sample.Stateful {
	c := &Lazy{g: z.g, triggers: z.triggers, text: bytes.Clone(z.text), lens: append([]int(nil), z.lens...)}
	if z.inner != nil {
		c.inner = z.inner.Clone().(*Masker)
	}
	return c
}

// Mask returns the tokens allowed next: nil (every token) while free.
func (z *Lazy) Mask() sample.Mask {
	if z.inner == nil {
		return nil
	}
	return z.inner.Mask()
}

// JumpForward is the grammar's jump-forward once triggered (nothing while free).
func (z *Lazy) JumpForward(grow int) (replace int, tokens []int32) {
	if z.inner == nil {
		return 0, nil
	}
	return z.inner.JumpForward(grow)
}

var _ sample.Forcer = (*Lazy)(nil)
