package tokenizer

import "unicode/utf8"

// Detokenizer turns a stream of token ids into text incrementally, for streaming output.
// Concatenating every Add result and the final Flush gives exactly Decode of all the ids.
//
// Add never ends its text inside a UTF-8 character: when a token (such as a byte token
// <0xE4>) leaves a character incomplete, its bytes are held back until the character is
// complete. Bytes that can never form a character (invalid UTF-8 in the token stream itself)
// are passed through as they are, as Decode does. The leading space that Decode drops
// (SentencePiece dummy prefix, WordPiece word start) is dropped here too.
//
// A Detokenizer is not safe for concurrent use; use one per sequence.
type Detokenizer struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // bytes held back: the start of an incomplete character
	started     bool   // some byte has been produced (the leading-space rule is settled)
}

// NewDetokenizer returns a Detokenizer for t. With skipSpecial, control and unknown tokens
// produce no text, as in Decode.
func NewDetokenizer(t *Tokenizer, skipSpecial bool) *Detokenizer {
	return &Detokenizer{t: t, skipSpecial: skipSpecial}
}

// Add appends token id and returns the text it completes, possibly "" (ids out of range,
// skipped special tokens, or bytes held back).
func (d *Detokenizer) Add(id int) string {
	if id < 0 || id >= len(d.t.pieces) || (d.skipSpecial && d.t.IsSpecial(id)) {
		return ""
	}
	piece := d.t.pieces[id]
	if len(piece) == 0 {
		return ""
	}
	if !d.started {
		d.started = true
		if d.t.stripSpace && piece[0] == ' ' {
			piece = piece[1:]
		}
	}
	d.pending = append(d.pending, piece...)
	cut := completeLen(d.pending)
	out := string(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// Flush returns the bytes still held back (an incomplete character at the end of the
// stream) and resets the held-back state; the leading-space rule stays settled.
func (d *Detokenizer) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// Pending reports how many bytes are held back.
func (d *Detokenizer) Pending() int { return len(d.pending) }

// completeLen returns the length of the longest prefix of b that does not end inside a
// UTF-8 character that later bytes could still complete.
func completeLen(b []byte) int {
	// Find the start of the last character: at most UTFMax-1 continuation bytes back.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if b[i]&0xC0 != 0x80 { // not a continuation byte
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}
