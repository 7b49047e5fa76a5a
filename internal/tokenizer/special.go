package tokenizer

import (
	"sort"
	"strings"
)

// specialTok is a token whose text is matched in the input before the model's encoder runs.
type specialTok struct {
	id    int
	text  string
	typ   TokenType
	strip Strip
}

// fragment is a piece of partitioned input: a special token (id >= 0) or raw text (id < 0).
type fragment struct {
	id   int
	text string
}

// buildSpecials lists the control, user-defined and unknown tokens of v, longest text first
// (ties by id), as llama.cpp's special-token cache does.
func buildSpecials(v *Vocab) []specialTok {
	var sp []specialTok
	for id, text := range v.Tokens {
		typ := v.TypeOf(id)
		if text == "" || (typ != TypeControl && typ != TypeUserDefined && typ != TypeUnknown) {
			continue
		}
		sp = append(sp, specialTok{id: id, text: text, typ: typ, strip: v.Strip[id]})
	}
	sort.SliceStable(sp, func(i, j int) bool { return len(sp[i].text) > len(sp[j].text) })
	return sp
}

// partition splits text on the texts of special tokens, following llama.cpp's
// tokenizer_st_partition: each special token in turn (longest first) is searched in every
// raw fragment left so far. Control and unknown tokens are matched only with parseSpecial;
// user-defined tokens always are. A token with StripLeft (StripRight) drops the ASCII
// whitespace before (after) it.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{id: -1, text: text}}
	for _, sp := range t.specials {
		if !parseSpecial && sp.typ != TypeUserDefined {
			continue
		}
		if !strings.Contains(text, sp.text) {
			continue
		}
		frags = splitOn(frags, sp)
	}
	return frags
}

// splitOn splits every raw fragment of frags on the text of sp.
func splitOn(frags []fragment, sp specialTok) []fragment {
	out := make([]fragment, 0, len(frags)+2)
	for _, f := range frags {
		if f.id >= 0 {
			out = append(out, f)
			continue
		}
		rest := f.text
		for {
			i := strings.Index(rest, sp.text)
			if i < 0 {
				break
			}
			left := rest[:i]
			if sp.strip&StripLeft != 0 {
				left = strings.TrimRight(left, asciiSpace)
			}
			if left != "" {
				out = append(out, fragment{id: -1, text: left})
			}
			out = append(out, fragment{id: sp.id})
			rest = rest[i+len(sp.text):]
			if sp.strip&StripRight != 0 {
				rest = strings.TrimLeft(rest, asciiSpace)
			}
		}
		if rest != "" {
			out = append(out, fragment{id: -1, text: rest})
		}
	}
	return out
}

// asciiSpace holds the characters C's isspace accepts.
const asciiSpace = " \t\n\v\f\r"
