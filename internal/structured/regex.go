package structured

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseRegex parses a regular expression that the whole output must match (as vLLM's
// `regex` and, wrapped by the schema compiler, JSON Schema's `pattern`). Supported: literal
// characters, '.', classes ([a-z], [^...], with \d \w \s and escapes inside), \d \w \s \D
// \W \S, the escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and escaped metacharacters,
// groups (plain, (?:...) and named (?P<n>...) / (?<n>...)), '|', the quantifiers * + ?
// {m} {m,} {m,n} (lazy forms such as *? are accepted: laziness does not change the
// language), '^' at the very start and '$' at the very end. Refused, with an error naming
// the construct and its byte offset: backreferences, lookaround, word boundaries, anchors
// elsewhere, inline flags, Unicode property classes and possessive quantifiers. '.' matches
// any code point but "\n"; classes match code points (UTF-8 encoded).
func ParseRegex(src string) (*Grammar, error) {
	p := &regexParser{src: src}
	n, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("regex: %w", err)
	}
	return &Grammar{rules: []rule{{name: "root", body: n}}}, nil
}

// Choice returns the grammar whose language is exactly the given strings.
func Choice(options []string) (*Grammar, error) {
	if len(options) == 0 {
		return nil, fmt.Errorf("choice: no options")
	}
	alts := make([]*node, len(options))
	for i, o := range options {
		alts[i] = literalNode([]byte(o))
	}
	return &Grammar{rules: []rule{{name: "root", body: altNode(alts...)}}}, nil
}

type regexParser struct {
	src string
	pos int
}

func (p *regexParser) errorf(off int, format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", off, fmt.Sprintf(format, args...))
}

func (p *regexParser) parse() (*node, error) {
	if strings.HasPrefix(p.src, "^") {
		p.pos = 1
	}
	n, err := p.alternatives(0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.src) {
		if p.src[p.pos] == ')' {
			return nil, p.errorf(p.pos, "unmatched ')'")
		}
		return nil, p.errorf(p.pos, "unexpected %q", p.src[p.pos])
	}
	return n, nil
}

func (p *regexParser) alternatives(depth int) (*node, error) {
	if depth > maxNesting {
		return nil, p.errorf(p.pos, "groups nested more than %d deep", maxNesting)
	}
	return alternativesOf(depth, p.sequence, func() bool {
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			return true
		}
		return false
	})
}

func (p *regexParser) sequence(depth int) (*node, error) {
	return sequenceOf(func() (bool, error) {
		if p.pos >= len(p.src) || p.src[p.pos] == '|' || p.src[p.pos] == ')' {
			return true, nil
		}
		if p.src[p.pos] != '$' {
			return false, nil
		}
		if p.pos == len(p.src)-1 && depth == 0 {
			p.pos++
			return true, nil
		}
		return false, p.errorf(p.pos, "'$' is supported only at the end of the expression")
	}, func() (*node, error) {
		atom, err := p.atom(depth)
		if err != nil {
			return nil, err
		}
		return p.quantifiers(atom)
	})
}

func (p *regexParser) atom(depth int) (*node, error) {
	start := p.pos
	c := p.src[p.pos]
	switch c {
	case '(':
		p.pos++
		if strings.HasPrefix(p.src[p.pos:], "?") {
			rest := p.src[p.pos:]
			switch {
			case strings.HasPrefix(rest, "?:"):
				p.pos += 2
			case strings.HasPrefix(rest, "?P<"), strings.HasPrefix(rest, "?<") && !strings.HasPrefix(rest, "?<=") && !strings.HasPrefix(rest, "?<!"):
				end := strings.IndexByte(rest, '>')
				if end < 0 {
					return nil, p.errorf(start, "unterminated group name")
				}
				p.pos += end + 1
			case strings.HasPrefix(rest, "?="), strings.HasPrefix(rest, "?!"), strings.HasPrefix(rest, "?<="), strings.HasPrefix(rest, "?<!"):
				return nil, p.errorf(start, "lookaround (?%c...) is not supported", rest[1])
			default:
				return nil, p.errorf(start, "group flags (?%.1s...) are not supported", rest[1:])
			}
		}
		inner, err := p.alternatives(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errorf(start, "unclosed '('")
		}
		p.pos++
		return inner, nil
	case '[':
		return p.class()
	case '.':
		p.pos++
		return classNode(negateRanges([]runeRange{{'\n', '\n'}})), nil
	case '^':
		return nil, p.errorf(p.pos, "'^' is supported only at the start of the expression")
	case '*', '+', '?', '{':
		if c == '{' && !p.isQuantifierBrace() {
			p.pos++
			return literalNode([]byte{'{'}), nil
		}
		return nil, p.errorf(p.pos, "quantifier %q with nothing to repeat", c)
	case '\\':
		rs, err := p.escape(false)
		if err != nil {
			return nil, err
		}
		return classNode(rs), nil
	}
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && size <= 1 {
		return nil, p.errorf(p.pos, "invalid UTF-8")
	}
	p.pos += size
	return literalNode(utf8.AppendRune(nil, r)), nil
}

// isQuantifierBrace reports whether the '{' at the current position opens {m}, {m,} or
// {m,n} (anything else is a literal brace, as in most dialects).
func (p *regexParser) isQuantifierBrace() bool {
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return false
	}
	body := p.src[p.pos+1 : p.pos+end]
	lo, hi, _ := strings.Cut(body, ",")
	digits := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	return lo != "" && digits(lo) && digits(hi)
}

func (p *regexParser) quantifiers(atom *node) (*node, error) {
	for p.pos < len(p.src) {
		min, max, ok := simpleRepeat(p.src[p.pos])
		switch {
		case ok:
			p.pos++
		case p.src[p.pos] == '{' && p.isQuantifierBrace():
			end := strings.IndexByte(p.src[p.pos:], '}')
			var err error
			if min, max, err = parseCounts(p.src[p.pos+1 : p.pos+end]); err != nil {
				return nil, p.errorf(p.pos, "%v", err)
			}
			p.pos += end + 1
		default:
			return atom, nil
		}
		if p.pos < len(p.src) && p.src[p.pos] == '?' {
			p.pos++ // lazy: the same language
		} else if p.pos < len(p.src) && p.src[p.pos] == '+' {
			return nil, p.errorf(p.pos, "possessive quantifiers are not supported")
		}
		atom = repeatNode(atom, min, max)
	}
	return atom, nil
}

// Perl classes as code point ranges.
var (
	digitRanges = []runeRange{{'0', '9'}}
	wordRanges  = []runeRange{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	spaceRanges = []runeRange{{'\t', '\r'}, {' ', ' '}}
)

// escape parses a backslash escape at the current position to the code points it matches.
func (p *regexParser) escape(inClass bool) ([]runeRange, error) {
	start := p.pos
	p.pos++
	if p.pos >= len(p.src) {
		return nil, p.errorf(start, "trailing backslash")
	}
	c := p.src[p.pos]
	p.pos++
	one := func(r rune) ([]runeRange, error) { return []runeRange{{r, r}}, nil }
	switch c {
	case 'd':
		return digitRanges, nil
	case 'w':
		return wordRanges, nil
	case 's':
		return spaceRanges, nil
	case 'D':
		return negateRanges(digitRanges), nil
	case 'W':
		return negateRanges(wordRanges), nil
	case 'S':
		return negateRanges(spaceRanges), nil
	case 'n':
		return one('\n')
	case 'r':
		return one('\r')
	case 't':
		return one('\t')
	case 'f':
		return one('\f')
	case 'v':
		return one('\v')
	case '0':
		return one(0)
	case 'x', 'u':
		n := 2
		if c == 'u' {
			n = 4
		}
		hex := ""
		if c == 'u' && strings.HasPrefix(p.src[p.pos:], "{") {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return nil, p.errorf(start, "unterminated \\u{")
			}
			hex = p.src[p.pos+1 : p.pos+end]
			p.pos += end + 1
		} else {
			if p.pos+n > len(p.src) {
				return nil, p.errorf(start, "short \\%c escape", c)
			}
			hex = p.src[p.pos : p.pos+n]
			p.pos += n
		}
		v, err := strconv.ParseUint(hex, 16, 32)
		if err != nil || v > utf8.MaxRune {
			return nil, p.errorf(start, "bad \\%c escape", c)
		}
		return one(rune(v))
	case 'b':
		if inClass {
			return one('\b')
		}
		return nil, p.errorf(start, "word boundary \\b is not supported")
	case 'B', 'A', 'z', 'Z', 'G':
		return nil, p.errorf(start, "anchor \\%c is not supported", c)
	case 'p', 'P':
		return nil, p.errorf(start, "Unicode property class \\%c is not supported", c)
	case 'k':
		return nil, p.errorf(start, "backreference \\k is not supported")
	}
	if c >= '1' && c <= '9' {
		return nil, p.errorf(start, "backreference \\%c is not supported", c)
	}
	if c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return nil, p.errorf(start, "unknown escape \\%c", c)
	}
	p.pos--
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += size
	return one(r)
}

// class parses a bracketed class at '['.
func (p *regexParser) class() (*node, error) {
	start := p.pos
	var negate bool
	p.pos, negate = openClass(p.src, p.pos)
	var ranges []runeRange
	first := true
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf(start, "unterminated character class")
		}
		c := p.src[p.pos]
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		if c == '[' && strings.HasPrefix(p.src[p.pos:], "[:") {
			return nil, p.errorf(p.pos, "POSIX classes [:name:] are not supported")
		}
		lo, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if len(lo) == 1 && lo[0].lo == lo[0].hi && p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			at := p.pos
			p.pos++
			hi, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if len(hi) != 1 || hi[0].lo != hi[0].hi {
				return nil, p.errorf(at, "class range ends in a class")
			}
			if hi[0].lo < lo[0].lo {
				return nil, p.errorf(at, "character range is reversed")
			}
			ranges = append(ranges, runeRange{lo[0].lo, hi[0].lo})
			continue
		}
		ranges = append(ranges, lo...)
	}
	if negate {
		ranges = negateRanges(ranges)
	}
	return classNode(ranges), nil
}

func (p *regexParser) classAtom() ([]runeRange, error) {
	if p.src[p.pos] == '\\' {
		return p.escape(true)
	}
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && size <= 1 {
		return nil, p.errorf(p.pos, "invalid UTF-8")
	}
	p.pos += size
	return []runeRange{{r, r}}, nil
}
