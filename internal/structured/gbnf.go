package structured

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxRepeatCount bounds the counts of {m,n} repetitions a front end accepts; larger counts
// are refused with an error rather than expanded.
const maxRepeatCount = 10000

// ParseGBNF parses a grammar in llama.cpp's GBNF dialect:
//
//	root  ::= "{" ws pair ("," ws pair)* "}"   # a comment
//	pair  ::= [a-z]+ ws ":" ws value
//	ws    ::= [ \t\n]{0,8}
//
// Rules are `name ::= alternatives`; names are letters, digits, '-' and '_'. An expression
// is a sequence of string literals ("..."), character classes ([a-z], [^"\\]), '.', rule
// names and parenthesized groups, with '|' between alternatives and postfix '*', '+', '?',
// '{m}', '{m,}', '{m,n}' and '{,n}'. Literals and classes take the escapes \n \r \t \\ \"
// \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH; classes and '.' match one code point (UTF-8
// encoded). A rule may continue over several lines; it ends where the next `name ::=`
// begins. The start rule is `root`. Errors name the line and column.
func ParseGBNF(src string) (*Grammar, error) {
	p := &gbnfParser{src: src, names: map[string]int{}}
	if err := p.parse(); err != nil {
		return nil, fmt.Errorf("gbnf: %w", err)
	}
	root, ok := p.names["root"]
	if !ok {
		return nil, fmt.Errorf("gbnf: no rule named root")
	}
	p.g.start = root
	return &p.g, nil
}

type gbnfParser struct {
	src   string
	pos   int
	g     Grammar
	names map[string]int // rule name -> index
	// defined[i] reports whether rule i has a definition (rules are created on first
	// reference); refAt[i] is where it was first referenced.
	defined []bool
	refAt   []int
}

// where returns "line L:C" for byte offset off.
func (p *gbnfParser) where(off int) string {
	line := 1 + strings.Count(p.src[:off], "\n")
	col := off - strings.LastIndexByte(p.src[:off], '\n')
	return fmt.Sprintf("line %d:%d", line, col)
}

func (p *gbnfParser) errorf(off int, format string, args ...any) error {
	return fmt.Errorf("%s: %s", p.where(off), fmt.Sprintf(format, args...))
}

func (p *gbnfParser) ruleIndex(name string, off int) int {
	if i, ok := p.names[name]; ok {
		return i
	}
	i := len(p.g.rules)
	p.names[name] = i
	p.g.rules = append(p.g.rules, rule{name: name})
	p.defined = append(p.defined, false)
	p.refAt = append(p.refAt, off)
	return i
}

func (p *gbnfParser) parse() error {
	for {
		p.skipSpace()
		if p.pos >= len(p.src) {
			break
		}
		start := p.pos
		name := p.name()
		if name == "" {
			return p.errorf(p.pos, "expected a rule name, found %s", p.found())
		}
		p.skipSpace()
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return p.errorf(p.pos, "expected ::= after rule name %q, found %s", name, p.found())
		}
		p.pos += 3
		i := p.ruleIndex(name, start)
		if p.defined[i] {
			return p.errorf(start, "rule %q defined twice (first at %s)", name, p.g.rules[i].pos)
		}
		p.defined[i] = true
		p.g.rules[i].pos = p.where(start)
		body, err := p.alternatives(0)
		if err != nil {
			return err
		}
		p.g.rules[i].body = body
		p.skipSpace()
		if p.pos < len(p.src) && !p.atRuleStart() {
			return p.errorf(p.pos, "unexpected %s in rule %q", p.found(), name)
		}
	}
	for i, ok := range p.defined {
		if !ok {
			return p.errorf(p.refAt[i], "undefined rule %q", p.g.rules[i].name)
		}
	}
	return nil
}

// found describes the input at the current position for an error message.
func (p *gbnfParser) found() string {
	if p.pos >= len(p.src) {
		return "end of input"
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return strconv.QuoteRune(r)
}

// skipSpace skips blanks, newlines and # comments.
func (p *gbnfParser) skipSpace() {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// atRuleStart reports whether the input at the current position is `name ::=`.
func (p *gbnfParser) atRuleStart() bool {
	save := p.pos
	defer func() { p.pos = save }()
	if p.name() == "" {
		return false
	}
	p.skipSpace()
	return strings.HasPrefix(p.src[p.pos:], "::=")
}

// maxNesting bounds parentheses so that hostile input cannot exhaust the stack.
const maxNesting = 1000

func (p *gbnfParser) alternatives(depth int) (*node, error) {
	if depth > maxNesting {
		return nil, p.errorf(p.pos, "groups nested more than %d deep", maxNesting)
	}
	return alternativesOf(depth, p.sequence, func() bool {
		p.skipSpace()
		return p.bar()
	})
}

// bar consumes a '|' at the current position and reports whether there was one.
func (p *gbnfParser) bar() bool {
	if p.pos < len(p.src) && p.src[p.pos] == '|' {
		p.pos++
		return true
	}
	return false
}

// alternativesOf parses sequences separated by '|': more, called after each sequence,
// consumes a separator and reports whether there was one.
func alternativesOf(depth int, sequence func(int) (*node, error), more func() bool) (*node, error) {
	var alts []*node
	for {
		seq, err := sequence(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if !more() {
			return altNode(alts...), nil
		}
	}
}

func (p *gbnfParser) sequence(depth int) (*node, error) {
	return sequenceOf(func() (bool, error) {
		p.skipSpace()
		return p.pos >= len(p.src) || p.src[p.pos] == '|' || p.src[p.pos] == ')' || p.atRuleStart(), nil
	}, func() (*node, error) {
		item, err := p.primary(depth)
		if err != nil {
			return nil, err
		}
		return p.postfix(item)
	})
}

// sequenceOf parses items until atEnd reports the end of the sequence (or an error).
func sequenceOf(atEnd func() (bool, error), item func() (*node, error)) (*node, error) {
	var items []*node
	for {
		end, err := atEnd()
		if err != nil {
			return nil, err
		}
		if end {
			return concatNode(items...), nil
		}
		n, err := item()
		if err != nil {
			return nil, err
		}
		items = append(items, n)
	}
}

func (p *gbnfParser) primary(depth int) (*node, error) {
	start := p.pos
	switch c := p.src[p.pos]; {
	case c == '"':
		return p.stringLiteral()
	case c == '[':
		return p.class()
	case c == '.':
		p.pos++
		return classNode([]runeRange{{0, utf8.MaxRune}}), nil
	case c == '(':
		p.pos++
		inner, err := p.alternatives(depth + 1)
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errorf(start, "unclosed '('")
		}
		p.pos++
		return inner, nil
	case isNameByte(c):
		name := p.name()
		return &node{op: opRef, ref: p.ruleIndex(name, start)}, nil
	}
	return nil, p.errorf(p.pos, "unexpected %s", p.found())
}

// stringLiteral parses a "..." literal at '"'.
func (p *gbnfParser) stringLiteral() (*node, error) {
	start := p.pos
	p.pos++
	var lit []byte
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errorf(start, "unterminated string literal")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return literalNode(lit), nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		lit = utf8.AppendRune(lit, r)
	}
}

// openClass steps over the '[' at pos and a '^' after it, reporting whether there was one.
func openClass(src string, pos int) (int, bool) {
	pos++
	if pos < len(src) && src[pos] == '^' {
		return pos + 1, true
	}
	return pos, false
}

// class parses a character class starting at '['.
func (p *gbnfParser) class() (*node, error) {
	start := p.pos
	var negate bool
	p.pos, negate = openClass(p.src, p.pos)
	var ranges []runeRange
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf(start, "unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			at := p.pos
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf(at, "character range %q-%q is reversed", lo, hi)
			}
		}
		ranges = append(ranges, runeRange{lo, hi})
	}
	if negate {
		ranges = negateRanges(ranges)
	}
	return classNode(ranges), nil
}

// char reads one code point of a literal or class: a UTF-8 character or an escape.
func (p *gbnfParser) char() (rune, error) {
	start := p.pos
	if p.src[p.pos] != '\\' {
		r, size := utf8.DecodeRuneInString(p.src[p.pos:])
		if r == utf8.RuneError && size <= 1 {
			return 0, p.errorf(start, "invalid UTF-8")
		}
		p.pos += size
		return r, nil
	}
	p.pos++
	if p.pos >= len(p.src) {
		return 0, p.errorf(start, "escape at end of input")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '/', '\'':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.pos+n > len(p.src) {
			return 0, p.errorf(start, "short \\%c escape", c)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errorf(start, "bad \\%c escape %q", c, p.src[start:p.pos+n])
		}
		p.pos += n
		return rune(v), nil
	}
	return 0, p.errorf(start, "unknown escape \\%c", c)
}

// postfix applies the repetition operators that follow an item.
func (p *gbnfParser) postfix(item *node) (*node, error) {
	for p.pos < len(p.src) {
		if min, max, ok := simpleRepeat(p.src[p.pos]); ok {
			item = repeatNode(item, min, max)
			p.pos++
			continue
		}
		if p.src[p.pos] != '{' {
			return item, nil
		}
		min, max, err := p.counts()
		if err != nil {
			return nil, err
		}
		item = repeatNode(item, min, max)
	}
	return item, nil
}

// simpleRepeat returns the counts of the postfix operators '*', '+' and '?'.
func simpleRepeat(c byte) (min, max int, ok bool) {
	switch c {
	case '*':
		return 0, -1, true
	case '+':
		return 1, -1, true
	case '?':
		return 0, 1, true
	}
	return 0, 0, false
}

// counts parses {m}, {m,}, {m,n} or {,n} at '{'.
func (p *gbnfParser) counts() (int, int, error) {
	start := p.pos
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, p.errorf(start, "unterminated repetition {")
	}
	body := p.src[p.pos+1 : p.pos+end]
	p.pos += end + 1
	min, max, err := parseCounts(body)
	if err != nil {
		return 0, 0, p.errorf(start, "%v", err)
	}
	return min, max, nil
}

// parseCounts parses the inside of a {m,n} repetition (max -1: unbounded).
func parseCounts(body string) (int, int, error) {
	num := func(s string) (int, error) {
		s = strings.TrimSpace(s)
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("bad repetition count %q", s)
		}
		if v > maxRepeatCount {
			return 0, fmt.Errorf("repetition count %d is over the limit of %d", v, maxRepeatCount)
		}
		return v, nil
	}
	lo, hi, comma := strings.Cut(body, ",")
	min, max := 0, -1
	var err error
	if strings.TrimSpace(lo) != "" || !comma {
		if min, err = num(lo); err != nil {
			return 0, 0, err
		}
	}
	if !comma {
		return min, min, nil
	}
	if strings.TrimSpace(hi) != "" {
		if max, err = num(hi); err != nil {
			return 0, 0, err
		}
		if max < min {
			return 0, 0, fmt.Errorf("repetition {%s} has max below min", body)
		}
	}
	return min, max, nil
}
