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
}

func newSPM(v *Vocab, ids map[string]int) *spmModel {
	m := &spmModel{vocab: v, ids: ids}
	for b := range 256 {
		m.byteID[b] = byteToken(ids, byte(b), v.UNK)
	}
	return m
}

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

// encode tokenizes fragment (spaces not yet escaped; any dummy prefix already added).
func (m *spmModel) encode(fragment string, out []int) []int {
	if fragment == "" {
		return out
	}
	text := strings.ReplaceAll(fragment, " ", spaceMarker)
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
