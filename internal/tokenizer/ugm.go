package tokenizer

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// ugmModel is the unigram language model tokenizer of T5 and its kin (GGUF tokenizer model
// "t5", llama.cpp's UGM), as SentencePiece runs it: the text is normalized (the precompiled
// character map, spaces written "▁", optionally a "▁" before it and runs of spaces merged),
// then Viterbi picks the segmentation into tokens whose scores (log probabilities) sum
// highest. A character no token covers becomes the unknown token, scored 10 below the lowest
// normal token; adjacent unknowns are emitted as one.
type ugmModel struct {
	vocab       *Vocab
	tokens      *byteTrie // normal, user-defined and unused tokens
	userDefined *byteTrie // user-defined tokens, which normalization leaves as they are
	charsMap    *charsMap // nil when the vocabulary has none
	unkScore    float64
}

func newUGM(v *Vocab) *ugmModel {
	m := &ugmModel{vocab: v, tokens: newByteTrie(), userDefined: newByteTrie()}
	minScore := math.MaxFloat32
	for id, text := range v.Tokens {
		switch v.TypeOf(id) {
		case TypeNormal:
			minScore = min(minScore, float64(v.ScoreOf(id)))
			m.tokens.insert([]byte(text), id)
		case TypeUnused:
			m.tokens.insert([]byte(text), id)
		case TypeUserDefined:
			m.tokens.insert([]byte(text), id)
			m.userDefined.insert([]byte(text), id)
		}
	}
	m.unkScore = minScore - 10
	m.charsMap = parseCharsMap(v.CharsMap)
	return m
}

// ugmBest is the best segmentation found so far of the text up to some offset: its last
// token, where that token starts, and the total score.
type ugmBest struct {
	id    int
	start int
	score float64
}

func (m *ugmModel) encode(fragment string, out []int, limit int) []int {
	text := m.normalize(fragment)
	if text == "" {
		return out
	}
	unk := m.vocab.UNK
	best := make([]ugmBest, len(text)+1)
	for i := range best {
		best[i] = ugmBest{id: unk, score: math.Inf(-1)}
	}
	best[0].score = 0
	for off := 0; off < len(text); {
		_, width := utf8.DecodeRuneInString(text[off:])
		cur := best[off].score
		covered := false // some token is exactly this character
		node := m.tokens
		for end := off; end < len(text); end++ {
			if node = node.next[text[end]]; node == nil {
				break
			}
			if node.id < 0 {
				continue
			}
			if end+1-off == width {
				covered = true
			}
			score := float64(m.vocab.ScoreOf(node.id))
			if m.vocab.TypeOf(node.id) == TypeUserDefined {
				score = 0 // user-defined tokens win over the pieces they hold
			}
			if s := cur + score; s > best[end+1].score {
				best[end+1] = ugmBest{id: node.id, start: off, score: s}
			}
		}
		if !covered {
			if s := cur + m.unkScore; s > best[off+width].score {
				best[off+width] = ugmBest{id: unk, start: off, score: s}
			}
		}
		off += width
	}
	// Walk back from the end; runs of unknown tokens become one.
	first := len(out)
	prevUnk := false
	for at := len(text); at > 0; at = best[at].start {
		b := best[at]
		isUnk := b.id == unk
		if !(isUnk && prevUnk) && b.id >= 0 {
			out = append(out, b.id)
		}
		prevUnk = isUnk
	}
	for i, j := first, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// normalize applies the character map, writes spaces as "▁", puts one before the text when
// the vocabulary adds a space prefix, and with RemoveExtraSpaces drops leading and trailing
// spaces and merges runs of them (then every word gets a "▁" before it).
func (m *ugmModel) normalize(s string) string {
	v := m.vocab
	out := make([]byte, 0, len(s)*3/2+3)
	prepended, inWord := false, false
	for i := 0; i < len(s); {
		repl, n := m.normalizePrefix(s, i)
		for k := 0; k < len(repl); k++ {
			c := repl[k]
			if c == ' ' {
				inWord = false
				if !v.RemoveExtraSpaces {
					out = append(out, spaceMarker...)
				}
				continue
			}
			if !inWord {
				inWord = true
				if v.AddSpacePrefix && !prepended || v.RemoveExtraSpaces {
					out = append(out, spaceMarker...)
					prepended = true
				}
			}
			out = append(out, c)
		}
		i += n
	}
	return string(out)
}

// normalizePrefix returns the normalized form of the text at s[i:] and how many bytes of it
// that consumes: a user-defined token as it is, else the longest match of the character
// map, else one character as it is (an invalid byte becomes U+FFFD).
func (m *ugmModel) normalizePrefix(s string, i int) (string, int) {
	if _, n := m.userDefined.longestPrefix(s[i:]); n > 0 {
		return s[i : i+n], n
	}
	if m.charsMap != nil {
		if repl, n, ok := m.charsMap.longestMatch(s[i:]); ok {
			return repl, n
		}
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return "\uFFFD", 1
	}
	return s[i : i+n], n
}

// charsMap is SentencePiece's precompiled character map (GGUF
// tokenizer.ggml.precompiled_charsmap): a little-endian uint32 giving the size of a double
// array, the array of packed uint32 nodes, then NUL-terminated replacement strings. The
// double array is a trie over input bytes, XOR-compressed (Kanda 2018): the child of node s
// for byte c is at BASE(s) ^ c when its check byte is c; a leaf's BASE leads to the node
// holding the offset of the replacement.
type charsMap struct {
	nodes []uint32
	repl  []byte
}

// parseCharsMap reads a precompiled character map; nil (none) when data is empty or
// malformed.
func parseCharsMap(data []byte) *charsMap {
	if len(data) < 4 {
		return nil
	}
	size := binary.LittleEndian.Uint32(data)
	if size%4 != 0 || uint64(size)+4 > uint64(len(data)) {
		return nil
	}
	cm := &charsMap{nodes: make([]uint32, size/4), repl: data[4+size:]}
	for i := range cm.nodes {
		cm.nodes[i] = binary.LittleEndian.Uint32(data[4+4*i:])
	}
	return cm
}

// Fields of a packed node.
func xcdaBase(n uint32) uint32  { return (n >> 10) << ((n & (1 << 9)) >> 6) }
func xcdaCheck(n uint32) uint32 { return n & (1<<31 | 0xFF) }
func xcdaLeaf(n uint32) bool    { return n>>8&1 == 1 }
func xcdaValue(n uint32) uint32 { return n & (1<<31 - 1) }

// longestMatch finds the longest prefix of s that the map rewrites: the replacement and
// the prefix length.
func (cm *charsMap) longestMatch(s string) (string, int, bool) {
	node := func(i uint32) (uint32, bool) {
		if int(i) >= len(cm.nodes) {
			return 0, false
		}
		return cm.nodes[i], true
	}
	root, ok := node(0)
	if !ok {
		return "", 0, false
	}
	idx := xcdaBase(root)
	matched, offset := 0, uint32(0)
	for k := 0; k < len(s) && s[k] != 0; k++ {
		c := uint32(s[k])
		idx ^= c
		n, ok := node(idx)
		if !ok || xcdaCheck(n) != c {
			break
		}
		idx ^= xcdaBase(n)
		if xcdaLeaf(n) {
			v, ok := node(idx)
			if !ok {
				break
			}
			matched, offset = k+1, xcdaValue(v)
		}
	}
	if matched == 0 || int(offset) >= len(cm.repl) {
		return "", 0, false
	}
	end := int(offset)
	for end < len(cm.repl) && cm.repl[end] != 0 {
		end++
	}
	if end == len(cm.repl) {
		return "", 0, false // unterminated
	}
	return string(cm.repl[offset:end]), matched, true
}
