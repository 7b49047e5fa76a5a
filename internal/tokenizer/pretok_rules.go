package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers of most model families are one expression, or a sequence of them, built
// from a handful of shapes: an optional prefix character before a run of a class, a run of at
// most n characters, English contractions, whitespace rules. Here each shape is a rule, a Go
// function that finds the match a backtracking engine would find for that one alternative
// at a given position; an alternation of rules, tried in order at each position from the
// left, is the whole expression, and sequence chains expressions as HF's Sequence of Split
// pre-tokenizers does (each splits the pieces of the one before, keeping the gaps).

// rule matches one alternative of an expression at byte offset i of s (i < len(s)): the end
// of the match, i itself for an empty match, or -1 when it does not match there.
type rule func(s string, i int) int

// alternation returns the pre-tokenizer that splits text at the matches of the alternation
// of rules (HF's Split with the Isolated behavior): at each position the first rule that
// matches wins, as in a backtracking engine; matches and the gaps between them become
// pieces. An empty match only marks a place to cut.
func alternation(rules ...rule) preTokenizer {
	return func(s string, yield func(string)) {
		gap := 0 // start of the text not yet yielded
		for i := 0; i < len(s); {
			end := -1
			for _, r := range rules {
				if end = r(s, i); end >= 0 {
					break
				}
			}
			if end < 0 || end == i {
				if end == i && i > gap {
					yield(s[gap:i])
					gap = i
				}
				_, n := runeAt(s, i)
				i += n
				continue
			}
			if i > gap {
				yield(s[gap:i])
			}
			yield(s[i:end])
			gap, i = end, end
		}
		if gap < len(s) {
			yield(s[gap:])
		}
	}
}

// sequence returns the pre-tokenizer that applies each step to every piece of the step
// before it (HF's Sequence pre-tokenizer, llama.cpp's list of expressions).
func sequence(steps ...preTokenizer) preTokenizer {
	if len(steps) == 1 {
		return steps[0]
	}
	first, rest := steps[0], sequence(steps[1:]...)
	return func(s string, yield func(string)) {
		first(s, func(p string) { rest(p, yield) })
	}
}

// Character classes.

func isL(r rune) bool  { return unicode.IsLetter(r) }
func isN(r rune) bool  { return unicode.IsNumber(r) }
func isP(r rune) bool  { return unicode.IsPunct(r) }
func isM(r rune) bool  { return unicode.IsMark(r) }
func isLM(r rune) bool { return unicode.IsLetter(r) || unicode.IsMark(r) }

// isSpace is \s.
func isSpace(r rune) bool { return unicode.IsSpace(r) }

// isPS is [\p{P}\p{S}].
func isPS(r rune) bool { return unicode.IsPunct(r) || unicode.IsSymbol(r) }

// isBreak is [\r\n].
func isBreak(r rune) bool { return r == '\r' || r == '\n' }

// isLeadLN is [^\r\n\p{L}\p{N}], the optional character before a word.
func isLeadLN(r rune) bool { return !isBreak(r) && !isL(r) && !isN(r) }

// isLeadLPS is [^\r\n\p{L}\p{P}\p{S}], DeepSeek V3's optional character before a word.
func isLeadLPS(r rune) bool { return !isBreak(r) && !isL(r) && !isPS(r) }

// isOtherLN is [^\s\p{L}\p{N}]: punctuation, symbols, marks and the rest.
func isOtherLN(r rune) bool { return !isSpace(r) && !isL(r) && !isN(r) }

// isOtherLMN is [^\s\p{L}\p{M}\p{N}].
func isOtherLMN(r rune) bool { return isOtherLN(r) && !isM(r) }

// isDigit is \d, a decimal digit of any script.
func isDigit(r rune) bool { return unicode.IsDigit(r) }

// isASCIIDigit is [0-9].
func isASCIIDigit(r rune) bool { return r >= '0' && r <= '9' }

// isASCIILetter is [A-Za-z].
func isASCIILetter(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' }

// isASCIIPunct is [!-/:-@\[-`{-~], every ASCII punctuation character and symbol.
func isASCIIPunct(r rune) bool {
	return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
}

// isWordChar is \w: letters, marks, decimal digits and connector punctuation.
func isWordChar(r rune) bool {
	return isL(r) || isM(r) || isDigit(r) || unicode.Is(unicode.Pc, r)
}

// isUpperish is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], the case-split expressions' leading class.
func isUpperish(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

// isLowerish is [\p{Ll}\p{Lm}\p{Lo}\p{M}], their trailing class.
func isLowerish(r rune) bool {
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

func isHan(r rune) bool { return unicode.Is(unicode.Han, r) }

// isCJKKana is [一-龥぀-ゟ゠-ヿ]: CJK ideographs to U+9FA5, hiragana and katakana.
func isCJKKana(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FA5 || r >= 0x3040 && r <= 0x30FF
}

// inSet returns the class of the characters of set.
func inSet(set string) func(rune) bool {
	return func(r rune) bool {
		for _, c := range set {
			if c == r {
				return true
			}
		}
		return false
	}
}

// not returns the complement of class in.
func not(in func(rune) bool) func(rune) bool { return func(r rune) bool { return !in(r) } }

// inRanges returns the class of the inclusive ranges lo, hi, lo, hi, ...
func inRanges(bounds ...rune) func(rune) bool {
	return func(r rune) bool {
		for k := 0; k+1 < len(bounds); k += 2 {
			if r >= bounds[k] && r <= bounds[k+1] {
				return true
			}
		}
		return false
	}
}

// Building blocks.

// skipRun returns the end of the run of class in that starts at i (i itself when none).
func skipRun(s string, i int, in func(rune) bool) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if !in(r) {
			break
		}
		i += n
	}
	return i
}

// skipAtMost returns the end of the run of class in that starts at i, taking at most max
// characters.
func skipAtMost(s string, i int, in func(rune) bool, max int) int {
	for k := 0; k < max && i < len(s); k++ {
		r, n := runeAt(s, i)
		if !in(r) {
			break
		}
		i += n
	}
	return i
}

// run is [class]+.
func run(in func(rune) bool) rule {
	return func(s string, i int) int {
		if end := skipRun(s, i, in); end > i {
			return end
		}
		return -1
	}
}

// atMost is [class]{1,max}.
func atMost(in func(rune) bool, max int) rule {
	return func(s string, i int) int {
		if end := skipAtMost(s, i, in, max); end > i {
			return end
		}
		return -1
	}
}

// one is [class].
func one(in func(rune) bool) rule { return atMost(in, 1) }

// literal matches the string lit.
func literal(lit string) rule {
	return func(s string, i int) int {
		if len(s)-i >= len(lit) && s[i:i+len(lit)] == lit {
			return i + len(lit)
		}
		return -1
	}
}

// prefixed is [lead]?[body]+[tail]*, with at most tailMax tail characters (tailMax < 0: no
// limit). It tries the lead character first and then goes without it, as a backtracking
// engine does.
func prefixed(lead, body, tail func(rune) bool, tailMax int) rule {
	return func(s string, i int) int {
		r, n := runeAt(s, i)
		end := -1
		if lead(r) && i+n < len(s) {
			if r2, _ := runeAt(s, i+n); body(r2) {
				end = skipRun(s, i+n, body)
			}
		}
		if end < 0 && body(r) {
			end = skipRun(s, i, body)
		}
		if end < 0 || tail == nil {
			return end
		}
		if tailMax < 0 {
			return skipRun(s, end, tail)
		}
		return skipAtMost(s, end, tail, tailMax)
	}
}

// spacePrefixed is \s?[class]+.
func spacePrefixed(in func(rune) bool) rule { return prefixed(isSpace, in, nil, 0) }

// blankPrefixed is " ?[class]+".
func blankPrefixed(in func(rune) bool) rule { return prefixed(isBlank, in, nil, 0) }

func isBlank(r rune) bool { return r == ' ' }

// contractions is 's|'t|'re|'ve|'m|'ll|'d; with foldCase, (?i:...) of them.
func contractions(foldCase bool) rule {
	return func(s string, i int) int {
		if s[i] != '\'' {
			return -1
		}
		if n := contraction(s[i+1:], foldCase); n > 0 {
			return i + 1 + n
		}
		return -1
	}
}

// spaceToBreak is \s*[\r\n]+ (and \s*[\r\n], which ends in the same place): the whitespace
// run up to and including its last line break.
func spaceToBreak(s string, i int) int {
	end := -1
	for j := i; j < len(s); {
		r, n := runeAt(s, j)
		if !isSpace(r) {
			break
		}
		j += n
		if isBreak(r) {
			end = j
		}
	}
	return end
}

// spaceNotBeforeWord is \s+(?!\S): a whitespace run that reaches the end of the text, or the
// run less its last character (left to prefix the word after it) when that leaves any.
func spaceNotBeforeWord(s string, i int) int {
	end, last := i, i
	for end < len(s) {
		r, n := runeAt(s, end)
		if !isSpace(r) {
			break
		}
		last = end
		end += n
	}
	switch {
	case end == i:
		return -1
	case end == len(s):
		return end
	case last > i:
		return last
	}
	return -1
}

// spaces is \s+.
func spaces(s string, i int) int { return run(isSpace)(s, i) }

// caseSplit is the pair of case-split alternatives of GPT-4o's o200k family (also Tekken,
// Kimi K2, Youtu):
//
//	[^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?
//
// with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}] (less Han for Kimi
// K2) and C, with withContractions, (?i:'s|'t|'re|'ve|'m|'ll|'d)?: a word is cut before an
// upper-case letter that follows a lower-case one ("camelCase" gives "camel", "Case").
func caseSplit(upper, lower func(rune) bool, withContractions bool) rule {
	// upperThenLower is U*W+ at k: U* takes the whole U run, then gives characters back
	// until W+ can start, as a backtracking engine does.
	upperThenLower := func(s string, k int) int {
		j := skipRun(s, k, upper)
		for q := j; ; {
			if q < len(s) {
				if r, _ := runeAt(s, q); lower(r) {
					return skipRun(s, q, lower)
				}
			}
			if q == k {
				return -1
			}
			_, n := utf8.DecodeLastRuneInString(s[k:q])
			q -= n
		}
	}
	// upperRun is U+W* at k.
	upperRun := func(s string, k int) int {
		j := skipRun(s, k, upper)
		if j == k {
			return -1
		}
		return skipRun(s, j, lower)
	}
	return func(s string, i int) int {
		r, n := runeAt(s, i)
		for _, alt := range []func(string, int) int{upperThenLower, upperRun} {
			end := -1
			if isLeadLN(r) && i+n < len(s) {
				end = alt(s, i+n)
			}
			if end < 0 {
				end = alt(s, i)
			}
			if end < 0 {
				continue
			}
			if withContractions && end < len(s) && s[end] == '\'' {
				if k := contraction(s[end+1:], true); k > 0 {
					end += 1 + k
				}
			}
			return end
		}
		return -1
	}
}

// Rules particular to one family.

// digitRun returns the byte offsets at which the characters of the run of decimal digits
// starting at i begin, and the run's end.
func digitRun(s string, i int) (starts []int, end int) {
	for end = i; end < len(s); {
		r, n := runeAt(s, end)
		if !isDigit(r) {
			break
		}
		starts = append(starts, end)
		end += n
	}
	return starts, end
}

// splitDigitGroups is SuperBPE's (?=(\d{3})+(?!\d)): text is cut before every group of
// three digits counted from the end of a digit run (the empty matches of the lookahead).
func splitDigitGroups(s string, yield func(string)) {
	start := 0
	for i := 0; i < len(s); {
		if r, n := runeAt(s, i); !isDigit(r) {
			i += n
			continue
		}
		starts, end := digitRun(s, i)
		for k := len(starts) % 3; k < len(starts); k += 3 {
			if cut := starts[k]; cut > start {
				yield(s[start:cut])
				start = cut
			}
		}
		i = end
	}
	if start < len(s) {
		yield(s[start:])
	}
}

// splitDigitsBeforeBoundary is Tiny Aya's \d{1,3}(?=(?:\d{3})*\b): a run of digits that ends
// at a word boundary is cut into groups of three counted from its end, the one to three
// digits left over first; a run that runs into a letter is left whole in the text around it.
func splitDigitsBeforeBoundary(s string, yield func(string)) {
	start := 0
	for i := 0; i < len(s); {
		if r, n := runeAt(s, i); !isDigit(r) {
			i += n
			continue
		}
		starts, end := digitRun(s, i)
		if end < len(s) {
			if r, _ := runeAt(s, end); isWordChar(r) {
				i = end
				continue
			}
		}
		if i > start {
			yield(s[start:i])
		}
		first := len(starts) % 3
		if first == 0 {
			first = 3
		}
		for k := first; k <= len(starts); k += 3 {
			cut := end
			if k < len(starts) {
				cut = starts[k]
			}
			yield(s[i:cut])
			i = cut
		}
		start = end
	}
	if start < len(s) {
		yield(s[start:])
	}
}

// cascadingSpaces is Jais 2's \s{512}(?!\S)|\s{256}(?!\S)|...|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}:
// a whitespace run not before a word is cut into pieces of power-of-two lengths.
func cascadingSpaces(s string, i int) int {
	// No piece is longer than 512, so 513 characters decide: more than k of them, or
	// exactly k that reach the end of the text.
	var ends []int // ends[k-1]: the end of the first k whitespace characters
	for j := i; j < len(s) && len(ends) <= 512; {
		r, n := runeAt(s, j)
		if !isSpace(r) {
			break
		}
		j += n
		ends = append(ends, j)
	}
	if len(ends) == 0 {
		return -1
	}
	atEnd := ends[len(ends)-1] == len(s)
	fits := func(k int) bool { return len(ends) > k || len(ends) == k && atEnd }
	for k := 512; k >= 4; k /= 2 {
		if fits(k) {
			return ends[k-1]
		}
	}
	for k := 2; k >= 1; k-- {
		if fits(k) {
			return ends[k-1]
		}
	}
	return ends[0]
}

// lettersWithSpaces is EXAONE MoE's [^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+:
// letters and their marks, words joined by single spaces.
func lettersWithSpaces(s string, i int) int {
	from := func(k int) int {
		if k >= len(s) {
			return -1
		}
		if r, _ := runeAt(s, k); !isL(r) {
			return -1
		}
		for k < len(s) {
			r, n := runeAt(s, k)
			switch {
			case isLM(r):
				k += n
			case r == ' ' && k+1 < len(s):
				if r2, _ := runeAt(s, k+1); isL(r2) {
					k++
					continue
				}
				return k
			default:
				return k
			}
		}
		return k
	}
	r, n := runeAt(s, i)
	if isLeadLN(r) {
		if end := from(i + n); end >= 0 {
			return end
		}
	}
	return from(i)
}

// chameleonImage is Chameleon's (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z.
func chameleonImage(s string, i int) int {
	const head = "IMGIMG"
	if len(s)-i < len(head) || s[i:i+len(head)] != head {
		return -1
	}
	j := skipAtMost(s, i+len(head), inRanges('A', 'I'), 4)
	if j == i+len(head) || j >= len(s) || s[j] != 'Z' {
		return -1
	}
	return j + 1
}

// chameleonSentinel is Chameleon's <sentinel:[0-9]+>.
func chameleonSentinel(s string, i int) int {
	const head = "<sentinel:"
	if len(s)-i < len(head) || s[i:i+len(head)] != head {
		return -1
	}
	j := skipRun(s, i+len(head), isASCIIDigit)
	if j == i+len(head) || j >= len(s) || s[j] != '>' {
		return -1
	}
	return j + 1
}

// splitDigitsFromRight is AFMoE's digit split: a run of digits (\p{N}) is cut into groups of
// three counted from its end, the one to two digits left over first; other text is kept.
func splitDigitsFromRight(s string, yield func(string)) {
	gap := 0
	for i := 0; i < len(s); {
		r, n := runeAt(s, i)
		if !isN(r) {
			i += n
			continue
		}
		var ends []int
		end := i
		for end < len(s) {
			r, n := runeAt(s, end)
			if !isN(r) {
				break
			}
			end += n
			ends = append(ends, end)
		}
		if i > gap {
			yield(s[gap:i])
		}
		start := i
		for k := len(ends) % 3; k <= len(ends); k += 3 {
			if k > 0 && ends[k-1] > start {
				yield(s[start:ends[k-1]])
				start = ends[k-1]
			}
		}
		gap, i = end, end
	}
	if gap < len(s) {
		yield(s[gap:])
	}
}
