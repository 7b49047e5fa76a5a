package tokenizer

import (
	"iter"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPieceModel is WordPiece as llama.cpp's llm_tokenizer_wpm runs it for BERT vocabs in
// GGUF, where word-start pieces carry a "▁" prefix and continuation pieces carry no "##".
// The text is NFD-normalized, stripped of accents, lower-cased and split on whitespace, punctuation, ASCII
// symbols and CJK characters; each word, prefixed with "▁", is covered greedily by the
// longest matching tokens, or becomes one unknown token when some position has no match.
type wordPieceModel struct {
	vocab  *Vocab
	ids    map[string]int
	maxLen int // longest token text in bytes
}

func newWordPiece(v *Vocab, ids map[string]int) *wordPieceModel {
	m := &wordPieceModel{vocab: v, ids: ids}
	for _, s := range v.Tokens {
		m.maxLen = max(m.maxLen, len(s))
	}
	return m
}

func (m *wordPieceModel) encode(fragment string, out []int, limit int) []int {
	for word := range wordPieceWords(fragment) {
		if limit > 0 && len(out) > limit {
			break
		}
		w := spaceMarker + word
		start := len(out)
		for i := 0; i < len(w); {
			j := min(len(w), i+m.maxLen)
			for ; j > i; j-- {
				if id, ok := m.ids[w[i:j]]; ok {
					out = append(out, id)
					break
				}
			}
			if j == i { // no token starts here: the whole word is unknown
				out = out[:start]
				break
			}
			i = j
		}
		if len(out) == start && m.vocab.UNK >= 0 {
			out = append(out, m.vocab.UNK)
		}
	}
	return out
}

// wordPieceWords is BERT's basic pre-tokenization as llama.cpp does it: NFD, lower case,
// whitespace splits, control characters and accents dropped, punctuation, ASCII symbols and CJK
// ideographs become words of their own. The words are yielded one at a time, so that an
// encoding that stops early does not split the rest of the text.
func wordPieceWords(text string) iter.Seq[string] {
	return func(yield func(string) bool) {
		var cur strings.Builder
		flush := func() bool {
			if cur.Len() == 0 {
				return true
			}
			w := cur.String()
			cur.Reset()
			return yield(w)
		}
		nfd := norm.NFD.String(text)
		for _, r := range nfd {
			switch {
			case unicode.IsSpace(r):
				if !flush() {
					return
				}
			case r == 0 || r == utf8.RuneError || unicode.Is(unicode.C, r) || unicode.Is(unicode.Mn, r):
				// dropped: control characters, and accents (nonspacing marks) split off by NFD
			case unicode.IsPunct(r) || (r < 0x7F && unicode.IsSymbol(r)) || isCJK(r):
				if !flush() {
					return
				}
				cur.WriteRune(unicode.ToLower(r))
				if !flush() {
					return
				}
			default:
				cur.WriteRune(unicode.ToLower(r))
			}
		}
		flush()
	}
}

// isCJK reports whether r is in the CJK ideograph blocks BERT splits on (with the upper
// bound of Extension E as HF's code has it).
func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) ||
		(r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) ||
		(r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) ||
		(r >= 0x2F800 && r <= 0x2FA1F)
}
