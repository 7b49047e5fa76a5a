package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// preTokenizer splits a fragment of text into the words that byte-level BPE merges within,
// calling yield with each (a non-empty substring of text; in order, they cover all of it).
//
// Each one is a hand-written scanner equivalent to the regular expression (or sequence of
// expressions, each splitting the pieces of the previous one and keeping the unmatched gaps)
// that HF tokenizers and llama.cpp use for that model family; the tests check them against the
// original expressions run by a backtracking engine.
type preTokenizer func(text string, yield func(word string))

// preSpec is what one tokenizer.ggml.pre name means for a byte-level BPE vocabulary: how
// text is split into words and how words are merged.
type preSpec struct {
	split preTokenizer
	// ignoreMerges: a word that is itself a token is emitted whole, without merging
	// (llama.cpp's ignore_merges, as the Llama 3 family's HF tokenizers do).
	ignoreMerges bool
	// raw: token texts are plain UTF-8 with <0xNN> byte tokens, not GPT-2's byte alphabet
	// (llama.cpp's byte_encode false); escapeSpaces writes spaces "▁" first.
	raw, escapeSpaces bool
	// newlineWords: a word of line feeds that is a token is emitted whole (Gemma 4).
	newlineWords bool
}

// preTokenizerFor returns the pre-tokenizer for a GGUF tokenizer.ggml.pre name.
func preTokenizerFor(name string) (preSpec, error) {
	if spec, ok := preSpecs[name]; ok {
		return spec, nil
	}
	return preSpec{}, fmt.Errorf("unknown byte-level BPE pre-tokenizer %q", name)
}

// preSpecs maps every tokenizer.ggml.pre name llama.cpp knows for byte-level BPE to its
// split; names that share an expression share a scanner. A missing name is llama.cpp's
// "default".
var preSpecs = func() map[string]preSpec {
	m := map[string]preSpec{}
	add := func(spec preSpec, names ...string) {
		for _, n := range names {
			if _, dup := m[n]; dup {
				panic("tokenizer: pre-tokenizer " + n + " listed twice")
			}
			m[n] = spec
		}
	}
	add(preSpec{split: splitDefault}, "", "default")
	add(preSpec{split: splitGPT2}, "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion",
		"granite-docling", "exaone4", "gigachat", "a.x-4.0", "mellum", "modern-bert", "roberta-bpe",
		"jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code")
	add(preSpec{split: splitLlama3, ignoreMerges: true}, "llama3", "llama-v3", "llama-bpe",
		"falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano")
	add(preSpec{split: splitLlama3}, "dbrx", "smaug-bpe", "glm4", "chatglm-bpe")
	add(preSpec{split: splitQwen2}, "qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "kormo",
		"f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2", "bailingmoe",
		"bailingmoe2", "llada-moe")
	add(preSpec{split: splitQwen35}, "qwen35")
	add(preSpec{split: splitDeepSeekLLM}, "deepseek-llm")
	add(preSpec{split: splitDeepSeekCoder}, "deepseek-coder")
	add(preSpec{split: splitDeepSeekV3}, "deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4")
	add(preSpec{split: splitFalcon}, "falcon")
	add(preSpec{split: splitStarCoder}, "starcoder", "refact", "command-r", "smollm", "codeshell",
		"exaone", "minerva-7b", "mellum2")
	add(preSpec{split: splitBloom}, "poro-chat", "bloom", "gpt3-finnish")
	add(preSpec{split: splitViking}, "viking")
	add(preSpec{split: splitTekken, ignoreMerges: true}, "tekken")
	add(preSpec{split: splitChameleon}, "chameleon")
	add(preSpec{split: splitGPT4o}, "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")
	add(preSpec{split: splitGPT4o, ignoreMerges: true}, "granite-embed-multi-97m")
	add(preSpec{split: splitTinyAya}, "tiny_aya", "cohere2moe")
	add(preSpec{split: splitKimiK2}, "kimi-k2")
	add(preSpec{split: splitSuperBPE}, "superbpe")
	add(preSpec{split: splitSeedCoder}, "seed-coder")
	add(preSpec{split: splitUfakZeka}, "ufakzeka")
	add(preSpec{split: splitLaguna}, "laguna")
	add(preSpec{split: splitExaoneMoE}, "exaone-moe")
	add(preSpec{split: splitMiniCPM5, ignoreMerges: true}, "minicpm5")
	add(preSpec{split: splitJais2}, "jais-2")
	add(preSpec{split: splitSpark25}, "spark2_5")
	add(preSpec{split: splitYoutu, ignoreMerges: true}, "youtu")
	add(preSpec{split: splitAFMoE}, "afmoe")
	add(preSpec{split: splitLines, raw: true, escapeSpaces: true, newlineWords: true},
		"gemma4", "granite-embed-multi-311m")
	add(preSpec{split: splitLines, raw: true, escapeSpaces: true}, "sarvam-moe")
	add(preSpec{split: splitNonSpace, raw: true}, "whitespace")
	return m
}()

// Character classes of the pre-tokenizer expressions: \p{L}, \p{N}, \s and everything else.
const (
	classOther uint8 = iota
	classLetter
	classNumber
	classSpace
)

// asciiClass holds the class of every ASCII character.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		t[c] = runeClassSlow(rune(c))
	}
	return t
}()

func runeClassSlow(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// runeAt decodes the rune at byte offset i of s. Invalid UTF-8 decodes as U+FFFD of width 1,
// which falls in classOther, so every byte of the input lands in some word.
func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// classAt returns the class of the rune at byte offset i and its width.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return runeClassSlow(r), n
}

// skipClass returns the end of the run of class cls that starts at i.
func skipClass(s string, i int, cls uint8) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of an English contraction ('s 't 're 've 'm 'll 'd) at the
// start of s (which begins just after the apostrophe), or 0. With foldCase the letters match
// in any case, including the Unicode simple case folds (ſ for s) that (?i:...) accepts.
func contraction(s string, foldCase bool) int {
	if s == "" {
		return 0
	}
	eq := func(i int, want byte) (int, bool) {
		if i >= len(s) {
			return 0, false
		}
		c := s[i]
		if c == want {
			return 1, true
		}
		if !foldCase {
			return 0, false
		}
		if c == want-'a'+'A' {
			return 1, true
		}
		if want == 's' && len(s) >= i+2 && s[i] == 0xC5 && s[i+1] == 0xBF { // U+017F ſ
			return 2, true
		}
		return 0, false
	}
	for _, one := range []byte{'s', 't'} {
		if n, ok := eq(0, one); ok {
			return n
		}
	}
	for _, two := range [][2]byte{{'r', 'e'}, {'v', 'e'}} {
		if n, ok := eq(0, two[0]); ok {
			if m, ok := eq(n, two[1]); ok {
				return n + m
			}
		}
	}
	if n, ok := eq(0, 'm'); ok {
		return n
	}
	if n, ok := eq(0, 'l'); ok {
		if m, ok := eq(n, 'l'); ok {
			return n + m
		}
	}
	if n, ok := eq(0, 'd'); ok {
		return n
	}
	return 0
}

// trailingSpace handles the whitespace rules common to all families, `\s+(?!\S)|\s+`, for a
// whitespace run that starts at i: a run reaching the end of text is taken whole; otherwise
// the run minus its last character (which is left to prefix the next word), or the single
// character when the run has only one.
func trailingSpace(s string, i int) int {
	end := i
	last := i
	for end < len(s) {
		c, n := classAt(s, end)
		if c != classSpace {
			break
		}
		last = end
		end += n
	}
	if end == len(s) || last == i {
		return end
	}
	return last
}

// splitGPT2 implements GPT-2's expression
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(s string, yield func(string)) {
	for i := 0; i < len(s); {
		end := gpt2Word(s, i)
		yield(s[i:end])
		i = end
	}
}

func gpt2Word(s string, i int) int {
	c := s[i]
	if c == '\'' {
		if n := contraction(s[i+1:], false); n > 0 {
			return i + 1 + n
		}
	}
	if c == ' ' && i+1 < len(s) {
		if cls, _ := classAt(s, i+1); cls != classSpace {
			return skipClass(s, i+1, cls)
		}
	}
	cls, _ := classAt(s, i)
	if cls != classSpace {
		return skipClass(s, i, cls)
	}
	return trailingSpace(s, i)
}

// splitLlama3 implements Llama 3's expression
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitLlama3(s string, yield func(string)) { splitLlama3Like(s, yield, 3) }

// splitQwen2 implements Qwen2's expression, Llama 3's with single digits (\p{N} for \p{N}{1,3}).
func splitQwen2(s string, yield func(string)) { splitLlama3Like(s, yield, 1) }

func splitLlama3Like(s string, yield func(string), maxDigits int) {
	for i := 0; i < len(s); {
		end := llama3Word(s, i, maxDigits)
		yield(s[i:end])
		i = end
	}
}

func llama3Word(s string, i, maxDigits int) int {
	r, n := runeAt(s, i)
	if r == '\'' {
		if k := contraction(s[i+1:], true); k > 0 {
			return i + 1 + k
		}
	}
	cls, _ := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == classLetter {
		return skipClass(s, i, classLetter)
	}
	if r != '\r' && r != '\n' && cls != classNumber && i+n < len(s) {
		if next, _ := classAt(s, i+n); next == classLetter {
			return skipClass(s, i+n, classLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if cls == classNumber {
		end := i
		for k := 0; k < maxDigits && end < len(s); k++ {
			c, w := classAt(s, end)
			if c != classNumber {
				break
			}
			end += w
		}
		return end
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := -1
	if cls == classOther {
		start = i
	} else if r == ' ' && i+1 < len(s) {
		if next, _ := classAt(s, i+1); next == classOther {
			start = i + 1
		}
	}
	if start >= 0 {
		end := skipClass(s, start, classOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	// \s*[\r\n]+ : the whitespace run up to and including its last line break.
	end, lastBreak := i, -1
	for end < len(s) {
		c, w := classAt(s, end)
		if c != classSpace {
			break
		}
		if s[end] == '\r' || s[end] == '\n' {
			lastBreak = end
		}
		end += w
	}
	if lastBreak >= 0 {
		return lastBreak + 1
	}
	return trailingSpace(s, i)
}

// matcher finds the leftmost match of one expression in s: its bounds, or ok false.
type matcher func(s string) (start, end int, ok bool)

// splitIsolated splits every piece by m, keeping matches and the gaps between them as separate
// pieces (HF's Split pre-tokenizer with the "Isolated" behavior, as llama.cpp applies a list of
// expressions).
func splitIsolated(pieces []string, m matcher) []string {
	out := make([]string, 0, len(pieces))
	for _, p := range pieces {
		for p != "" {
			start, end, ok := m(p)
			if !ok {
				out = append(out, p)
				break
			}
			if start > 0 {
				out = append(out, p[:start])
			}
			out = append(out, p[start:end])
			p = p[end:]
		}
	}
	return out
}

// splitDeepSeekLLM implements DeepSeek LLM's sequence of expressions:
//
//	[\r\n]
//	\s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+   (the table deepseekLetters)
//	\s?[!-/:-~！-／：-～‘-‟　-。]+
//	\s+$
//	[一-龥ࠀ-一가-퟿]+
//	\p{N}+
func splitDeepSeekLLM(s string, yield func(string)) {
	pieces := []string{s}
	pieces = splitIsolated(pieces, matchLineBreak)
	pieces = splitIsolated(pieces, func(p string) (int, int, bool) { return matchSpacePrefixedRun(p, isDeepSeekLetter) })
	pieces = splitIsolated(pieces, func(p string) (int, int, bool) { return matchSpacePrefixedRun(p, isDeepSeekPunct) })
	pieces = splitIsolated(pieces, matchTrailingSpace)
	pieces = splitIsolated(pieces, func(p string) (int, int, bool) { return matchRun(p, isDeepSeekCJK) })
	pieces = splitIsolated(pieces, func(p string) (int, int, bool) { return matchRun(p, unicode.IsNumber) })
	for _, p := range pieces {
		yield(p)
	}
}

// matchLineBreak matches [\r\n].
func matchLineBreak(s string) (int, int, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' || s[i] == '\n' {
			return i, i + 1, true
		}
	}
	return 0, 0, false
}

// matchRun matches [class]+.
func matchRun(s string, in func(rune) bool) (int, int, bool) {
	for i := 0; i < len(s); {
		r, n := runeAt(s, i)
		if in(r) {
			end := i + n
			for end < len(s) {
				r, w := runeAt(s, end)
				if !in(r) {
					break
				}
				end += w
			}
			return i, end, true
		}
		i += n
	}
	return 0, 0, false
}

// matchSpacePrefixedRun matches \s?[class]+, trying at each position first with one leading
// whitespace character and then without, as a backtracking engine does.
func matchSpacePrefixedRun(s string, in func(rune) bool) (int, int, bool) {
	for i := 0; i < len(s); {
		r, n := runeAt(s, i)
		start := -1
		if unicode.IsSpace(r) && i+n < len(s) {
			if r2, _ := runeAt(s, i+n); in(r2) {
				start = i + n
			}
		}
		if start < 0 && in(r) {
			start = i
		}
		if start >= 0 {
			end := start
			for end < len(s) {
				r, w := runeAt(s, end)
				if !in(r) {
					break
				}
				end += w
			}
			return i, end, true
		}
		i += n
	}
	return 0, 0, false
}

// matchTrailingSpace matches \s+$ (within a piece that holds no line break): the whitespace
// run that ends the piece.
func matchTrailingSpace(s string) (int, int, bool) {
	start := len(s)
	for start > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:start])
		if !unicode.IsSpace(r) {
			break
		}
		start -= n
	}
	if start == len(s) {
		return 0, 0, false
	}
	return start, len(s), true
}

// isDeepSeekPunct reports membership in [!-/:-~！-／：-～‘-‟　-。].
func isDeepSeekPunct(r rune) bool {
	return r >= '!' && r <= '/' || r >= ':' && r <= '~' ||
		r >= 0xFF01 && r <= 0xFF0F || r >= 0xFF1A && r <= 0xFF5E ||
		r >= 0x2018 && r <= 0x201F || r >= 0x3000 && r <= 0x3002
}

// isDeepSeekCJK reports membership in [一-龥ࠀ-一가-퟿].
func isDeepSeekCJK(r rune) bool {
	return r >= 0x0800 && r <= 0x9FA5 || r >= 0xAC00 && r <= 0xD7FF
}

// isDeepSeekLetter reports membership in DeepSeek LLM's letter class (the cased letters of an
// older Unicode version, spelled out as ranges in its tokenizer.json).
func isDeepSeekLetter(r rune) bool {
	if r < 0x80 {
		return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z'
	}
	lo, hi := 0, len(deepseekLetters)
	for lo < hi {
		mid := (lo + hi) / 2
		switch {
		case r < deepseekLetters[mid][0]:
			hi = mid
		case r > deepseekLetters[mid][1]:
			lo = mid + 1
		default:
			return true
		}
	}
	return false
}

// deepseekLetters lists the inclusive ranges of DeepSeek LLM's letter class, sorted.
var deepseekLetters = [...][2]rune{
	{0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6},
	{0x00F8, 0x01BA}, {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373},
	{0x0376, 0x0377}, {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A},
	{0x038C, 0x038C}, {0x038E, 0x03A1}, {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F},
	{0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
	{0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15},
	{0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
	{0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC},
	{0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
	{0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107},
	{0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
	{0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
	{0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
	{0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F},
	{0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
	{0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
	{0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
}
