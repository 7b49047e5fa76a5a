package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// spaceMarker is SentencePiece's escaped space, U+2581 LOWER ONE EIGHTH BLOCK.
const spaceMarker = "\u2581"

// spmModel is SentencePiece-style BPE as llama.cpp's llm_tokenizer_spm runs it: the text is
// split into UTF-8 characters, adjacent symbols are merged while their concatenation is a
// token, highest score first, and symbols that are not tokens fall back to byte tokens.
type spmModel struct {
	vocab  *Vocab
	ids    map[string]int
	byteID [256]int // token for each byte: "<0xNN>", else the one-byte text, else unk (-1 if none)
	// joins holds the pairs of characters (a, b), b a cut candidate (spmCutBefore), that
	// some token contains next to each other: a text may be cut before b where it follows
	// any other character without changing its tokens.
	joins map[[2]rune]bool
}

func newSPM(v *Vocab, ids map[string]int) *spmModel {
	m := &spmModel{vocab: v, ids: ids, joins: make(map[[2]rune]bool)}
	for b := range 256 {
		m.byteID[b] = byteToken(ids, byte(b), v.UNK)
	}
	for text := range ids {
		prev := utf8.RuneError
		for _, r := range text {
			if spmCutBefore(r) && prev != utf8.RuneError {
				m.joins[[2]rune{prev, r}] = true
			}
			prev = r
		}
	}
	return m
}

// spmCutBefore reports whether a text may be cut before r when no token joins r to the
// character before it: the escaped space, a line break, CJK punctuation.
func spmCutBefore(r rune) bool {
	switch r {
	case '\u2581', '\n', '\u3001', '\u3002', '\uff0c', '\uff01', '\uff1f':
		return true
	}
	return false
}

// spmChunkBytes is the size from which encode with a token limit cuts a text into
// independently encoded chunks (at places where no token can span the cut, so the tokens
// are the same), checking the limit after each.
const spmChunkBytes = 4096

// byteToken finds the token for byte b: "<0xNN>", else the one-byte string, else unk.
func byteToken(ids map[string]int, b byte, unk int) int {
	const hex = "0123456789ABCDEF"
	if id, ok := ids[string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})]; ok {
		return id
	}
	if id, ok := ids[string([]byte{b})]; ok {
		return id
	}
	return unk
}

// spmSymbol is a span of the escaped text in a doubly linked list of symbols.
type spmSymbol struct {
	prev, next int // neighbour indexes, -1 at the ends
	start, n   int // byte span in the text; n == 0 once merged into the left neighbour
}

// spmBigram is a candidate merge of two adjacent symbols.
type spmBigram struct {
	left, right int
	score       float32
	size        int // byte length of the merged text, to detect stale entries
}

// spmQueue is a max-heap of bigrams: highest score first, then leftmost.
type spmQueue []spmBigram

// before reports whether a comes out of the queue before b.
func (a spmBigram) before(b spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

func (q *spmQueue) push(b spmBigram) {
	h := append(*q, b)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

func (q *spmQueue) pop() spmBigram {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		best, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].before(h[best]) {
			best = l
		}
		if r < len(h) && h[r].before(h[best]) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	*q = h
	return top
}

// encode tokenizes fragment (spaces not yet escaped; any dummy prefix already added). With
// limit > 0 it encodes the text in chunks of about spmChunkBytes and stops after the chunk
// that takes out past limit ids.
func (m *spmModel) encode(fragment string, out []int, limit int) []int {
	if fragment == "" {
		return out
	}
	text := strings.ReplaceAll(fragment, " ", spaceMarker)
	if limit <= 0 {
		return m.encodeText(text, out)
	}
	return m.encodeChunks(text, out, limit, spmChunkBytes)
}

// encodeChunks encodes text chunk by chunk, each at least chunk bytes long where a safe cut
// follows, until out holds more than limit ids.
func (m *spmModel) encodeChunks(text string, out []int, limit, chunk int) []int {
	for text != "" && len(out) <= limit {
		cut := m.safeCut(text, chunk)
		out = m.encodeText(text[:cut], out)
		text = text[cut:]
	}
	return out
}

// safeCut returns the first place at or after byte from where text can be cut without
// changing its tokens, or len(text) when there is none: before a cut candidate that no
// token joins to the character before it. No merged symbol can span such a place (it
// would be a token holding both characters), and merges on either side never meet, so
// encoding the two parts apart gives the same tokens.
func (m *spmModel) safeCut(text string, from int) int {
	if from >= len(text) {
		return len(text)
	}
	// Start on a character boundary: a continuation byte cannot begin a character.
	for from > 0 && !utf8.RuneStart(text[from]) {
		from--
	}
	prev, _ := utf8.DecodeLastRuneInString(text[:from])
	for i := from; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if i > 0 && spmCutBefore(r) && prev != utf8.RuneError && !m.joins[[2]rune{prev, r}] {
			return i
		}
		prev = r
		i += n
	}
	return len(text)
}

// encodeText tokenizes text, its spaces escaped.
func (m *spmModel) encodeText(text string, out []int) []int {
	if text == "" {
		return out
	}
	syms := make([]spmSymbol, 0, len(text))
	for off := 0; off < len(text); {
		// One symbol per UTF-8 character; each byte of an invalid sequence is a symbol of its
		// own (llama.cpp trusts the lead byte, which can swallow a following "▁").
		_, n := utf8.DecodeRuneInString(text[off:])
		i := len(syms)
		next := i + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSymbol{prev: i - 1, next: next, start: off, n: n})
		off += n
	}

	q := make(spmQueue, 0, len(syms))
	tryAdd := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		l, r := syms[left], syms[right]
		id, ok := m.ids[text[l.start:r.start+r.n]]
		if !ok {
			return
		}
		q.push(spmBigram{left: left, right: right, score: m.vocab.ScoreOf(id), size: l.n + r.n})
	}
	for i := 1; i < len(syms); i++ {
		tryAdd(i-1, i)
	}
	for len(q) > 0 {
		bg := q.pop()
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // stale: one side was merged already
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		tryAdd(l.prev, bg.left)
		tryAdd(bg.left, l.next)
	}

	for i := 0; i != -1; i = syms[i].next {
		s := syms[i]
		piece := text[s.start : s.start+s.n]
		if id, ok := m.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			if id := m.byteID[piece[j]]; id >= 0 {
				out = append(out, id)
			}
		}
	}
	return out
}
