package backend

import "fmt"

// MaskWords returns the number of uint32 words of a vocabulary mask over vocab tokens.
//
// A vocabulary mask says which tokens a logits row may pick: bit t%32 of word t/32 set
// means token t is allowed; the bits past the last token are ignored. A nil mask allows
// every token.
func MaskWords(vocab int) int { return (vocab + 31) / 32 }

// Allowed reports whether mask (nil, or MaskWords(vocab) words with t < vocab) allows
// token t.
func Allowed(mask []uint32, t int) bool {
	return mask == nil || mask[t/32]>>(t%32)&1 != 0
}

// CheckMasks checks the masks of a logits op over rows rows of vocab tokens: nil, or one
// entry per row, each nil or of MaskWords(vocab) words.
func CheckMasks(masks [][]uint32, rows, vocab int) error {
	if masks == nil {
		return nil
	}
	if len(masks) != rows {
		return fmt.Errorf("%d vocabulary masks for %d logits rows", len(masks), rows)
	}
	want := MaskWords(vocab)
	for i, m := range masks {
		if m != nil && len(m) != want {
			return fmt.Errorf("logits row %d: vocabulary mask of %d words, want %d for %d tokens", i, len(m), want, vocab)
		}
	}
	return nil
}
