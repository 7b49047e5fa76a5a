package structured

import (
	"fmt"
	"strings"
)

// ParseEBNF parses a Lark-like EBNF grammar:
//
//	start: pair ("," pair)*
//	pair: KEY ":" value
//	?value: NUMBER | "true" | "false" | "[" [value ("," value)*] "]"
//	KEY: /[a-z_]+/
//	%import common.NUMBER
//	%ignore " "
//
// Rules are `name: alternatives` (lowercase names are rules, uppercase names terminals; the
// '?' and '!' prefixes and a `.N` priority are accepted and change nothing here); an
// alternative may go on over lines that begin with '|'. Items are "literals" (with the
// escapes of GBNF), /regular expressions/ (ParseRegex's syntax, without flags), names,
// (groups), [optional groups], and the postfix '?', '*', '+', `~ n` and `~ n..m`; `-> alias`
// after an alternative is ignored. `%ignore ITEM` lets ITEM repeat between the items of
// every rule (not inside terminals) and around the whole output; `%import common.NAME` knows
// Lark's common terminals WS, WS_INLINE, NEWLINE, CNAME, WORD, LETTER, LCASE_LETTER,
// UCASE_LETTER, DIGIT, HEXDIGIT, INT, SIGNED_INT, DECIMAL, FLOAT, SIGNED_FLOAT, NUMBER,
// SIGNED_NUMBER and ESCAPED_STRING. The start rule is `start`. Refused with a line:column
// error: other imports and directives, templates, case-insensitive literals and regex flags.
func ParseEBNF(src string) (*Grammar, error) {
	p := &ebnfParser{gbnfParser: gbnfParser{src: src, names: map[string]int{}}}
	if err := p.parse(); err != nil {
		return nil, fmt.Errorf("ebnf: %w", err)
	}
	start, ok := p.names["start"]
	if !ok {
		return nil, fmt.Errorf("ebnf: no rule named start")
	}
	if p.ignore != nil {
		p.intersperse()
		ign := repeatNode(p.ignore, 0, -1)
		p.g.rules = append(p.g.rules, rule{name: "(start)", body: concatNode(ign, &node{op: opRef, ref: start}, ign)})
		start = len(p.g.rules) - 1
	}
	p.g.start = start
	return &p.g, nil
}

// commonTerminals are the terminals of Lark's common.lark that %import knows, as regexes.
var commonTerminals = map[string]string{
	"WS":             `[ \t\f\r\n]+`,
	"WS_INLINE":      `[ \t]+`,
	"NEWLINE":        `(\r?\n[\t ]*)+`,
	"CNAME":          `[_a-zA-Z][_a-zA-Z0-9]*`,
	"WORD":           `[a-zA-Z]+`,
	"LETTER":         `[a-zA-Z]`,
	"LCASE_LETTER":   `[a-z]`,
	"UCASE_LETTER":   `[A-Z]`,
	"DIGIT":          `[0-9]`,
	"HEXDIGIT":       `[a-fA-F0-9]`,
	"INT":            `[0-9]+`,
	"SIGNED_INT":     `[+-]?[0-9]+`,
	"DECIMAL":        `[0-9]+\.[0-9]*|\.[0-9]+`,
	"FLOAT":          `([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+|[0-9]+\.[0-9]*|\.[0-9]+`,
	"SIGNED_FLOAT":   `[+-]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+|[0-9]+\.[0-9]*|\.[0-9]+)`,
	"NUMBER":         `([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+|[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+`,
	"SIGNED_NUMBER":  `[+-]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+|[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)`,
	"ESCAPED_STRING": `"([^"\\]|\\.)*"`,
}

type ebnfParser struct {
	gbnfParser
	ignore *node
	// parserRule[i]: rule i is a (lowercase) rule, whose items %ignore separates
	parserRule map[int]bool
}

// skipBlank skips spaces, tabs and comments but not newlines.
func (p *ebnfParser) skipBlank() {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '#' || strings.HasPrefix(p.src[p.pos:], "//"):
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

// skipLines skips blanks and newlines.
func (p *ebnfParser) skipLines() {
	for {
		p.skipBlank()
		if p.pos < len(p.src) && p.src[p.pos] == '\n' {
			p.pos++
			continue
		}
		return
	}
}

// continues reports whether the rule goes on past a newline: the next non-blank line
// begins with '|'. It consumes the newlines when it does.
func (p *ebnfParser) continues() bool {
	save := p.pos
	p.skipLines()
	if p.pos < len(p.src) && p.src[p.pos] == '|' {
		return true
	}
	p.pos = save
	return false
}

func (p *ebnfParser) parse() error {
	p.parserRule = map[int]bool{}
	for {
		p.skipLines()
		if p.pos >= len(p.src) {
			break
		}
		start := p.pos
		if p.src[p.pos] == '%' {
			if err := p.directive(); err != nil {
				return err
			}
			continue
		}
		for p.pos < len(p.src) && (p.src[p.pos] == '?' || p.src[p.pos] == '!') {
			p.pos++
		}
		name := p.name()
		if name == "" {
			return p.errorf(p.pos, "expected a rule name, found %s", p.found())
		}
		if p.pos < len(p.src) && p.src[p.pos] == '.' { // priority
			p.pos++
			for p.pos < len(p.src) && (p.src[p.pos] >= '0' && p.src[p.pos] <= '9' || p.src[p.pos] == '-') {
				p.pos++
			}
		}
		if p.pos < len(p.src) && p.src[p.pos] == '{' {
			return p.errorf(p.pos, "templates (%s{...}) are not supported", name)
		}
		p.skipBlank()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return p.errorf(p.pos, "expected ':' after rule name %q, found %s", name, p.found())
		}
		p.pos++
		body, err := p.alternatives(0)
		if err != nil {
			return err
		}
		if err := p.define(name, start, body); err != nil {
			return err
		}
		if strings.ToLower(name) == name { // a rule, not a TERMINAL
			p.parserRule[p.names[name]] = true
		}
		p.skipBlank()
		if p.pos < len(p.src) && p.src[p.pos] != '\n' {
			return p.errorf(p.pos, "unexpected %s in rule %q", p.found(), name)
		}
	}
	for i, ok := range p.defined {
		if !ok {
			return p.errorf(p.refAt[i], "undefined name %q", p.g.rules[i].name)
		}
	}
	return nil
}

func (p *ebnfParser) define(name string, at int, body *node) error {
	i := p.ruleIndex(name, at)
	if p.defined[i] {
		return p.errorf(at, "%q defined twice (first at %s)", name, p.g.rules[i].pos)
	}
	p.defined[i] = true
	p.g.rules[i].pos = p.where(at)
	p.g.rules[i].body = body
	return nil
}

func (p *ebnfParser) directive() error {
	start := p.pos
	p.pos++
	word := p.name()
	p.skipBlank()
	switch word {
	case "ignore":
		item, err := p.item(0)
		if err != nil {
			return err
		}
		if p.ignore == nil {
			p.ignore = item
		} else {
			p.ignore = altNode(p.ignore, item)
		}
		return nil
	case "import":
		nameStart := p.pos
		for p.pos < len(p.src) && (isNameByte(p.src[p.pos]) || p.src[p.pos] == '.') {
			p.pos++
		}
		path := p.src[nameStart:p.pos]
		term, ok := strings.CutPrefix(path, "common.")
		re, known := commonTerminals[term]
		if !ok || !known {
			return p.errorf(nameStart, "%%import %s: only common.NAME of Lark's common terminals is supported", path)
		}
		g, err := ParseRegex(re)
		if err != nil {
			return p.errorf(nameStart, "internal error: %v", err)
		}
		return p.define(term, nameStart, g.rules[0].body)
	}
	return p.errorf(start, "directive %%%s is not supported", word)
}

func (p *ebnfParser) alternatives(depth int) (*node, error) {
	if depth > maxNesting {
		return nil, p.errorf(p.pos, "groups nested more than %d deep", maxNesting)
	}
	return alternativesOf(depth, p.sequence, func() bool {
		p.skipBlank()
		if depth > 0 {
			p.skipLines()
		}
		return p.bar() || depth == 0 && p.continues() && p.bar()
	})
}

func (p *ebnfParser) sequence(depth int) (*node, error) {
	var items []*node
	for {
		p.skipBlank()
		if depth > 0 {
			p.skipLines()
		}
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		if c == '|' || c == ')' || c == ']' || c == '\n' {
			break
		}
		if strings.HasPrefix(p.src[p.pos:], "->") { // an alias: skip its name
			p.pos += 2
			p.skipBlank()
			p.name()
			continue
		}
		item, err := p.item(depth)
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return concatNode(items...), nil
}

// item parses one item with its postfix operators.
func (p *ebnfParser) item(depth int) (*node, error) {
	start := p.pos
	var atom *node
	switch c := p.src[p.pos]; {
	case c == '"':
		lit, err := p.stringLiteral()
		if err != nil {
			return nil, err
		}
		if p.pos < len(p.src) && p.src[p.pos] == 'i' {
			return nil, p.errorf(p.pos, "case-insensitive literals (\"...\"i) are not supported")
		}
		atom = lit
	case c == '/':
		re, err := p.regex()
		if err != nil {
			return nil, err
		}
		atom = re
	case c == '(' || c == '[':
		p.pos++
		inner, err := p.alternatives(depth + 1)
		if err != nil {
			return nil, err
		}
		p.skipLines()
		closer := map[byte]byte{'(': ')', '[': ']'}[c]
		if p.pos >= len(p.src) || p.src[p.pos] != closer {
			return nil, p.errorf(start, "unclosed %q", c)
		}
		p.pos++
		atom = inner
		if c == '[' {
			atom = repeatNode(inner, 0, 1)
		}
	case isNameByte(c):
		name := p.name()
		if p.pos < len(p.src) && p.src[p.pos] == '{' {
			return nil, p.errorf(p.pos, "templates (%s{...}) are not supported", name)
		}
		atom = &node{op: opRef, ref: p.ruleIndex(name, start)}
	default:
		return nil, p.errorf(p.pos, "unexpected %s", p.found())
	}
	for p.pos < len(p.src) {
		if save := p.pos; p.src[p.pos] == ' ' || p.src[p.pos] == '\t' {
			if p.skipBlank(); p.pos >= len(p.src) || p.src[p.pos] != '~' {
				p.pos = save
				return atom, nil
			}
		}
		if min, max, ok := simpleRepeat(p.src[p.pos]); ok {
			atom = repeatNode(atom, min, max)
			p.pos++
			continue
		}
		if p.src[p.pos] != '~' {
			return atom, nil
		}
		p.pos++
		p.skipBlank()
		min, max, err := p.tildeCounts()
		if err != nil {
			return nil, err
		}
		atom = repeatNode(atom, min, max)
	}
	return atom, nil
}

// tildeCounts parses the n or n..m of `item ~ n..m`.
func (p *ebnfParser) tildeCounts() (int, int, error) {
	start := p.pos
	for p.pos < len(p.src) && (p.src[p.pos] >= '0' && p.src[p.pos] <= '9' || p.src[p.pos] == '.') {
		p.pos++
	}
	text := p.src[start:p.pos]
	lo, hi, ranged := strings.Cut(text, "..")
	body := lo
	if ranged {
		body = lo + "," + hi
		if hi == "" {
			return 0, 0, p.errorf(start, "bad repetition ~ %s", text)
		}
	}
	min, max, err := parseCounts(body)
	if err != nil {
		return 0, 0, p.errorf(start, "%v", err)
	}
	return min, max, nil
}

func (p *ebnfParser) regex() (*node, error) {
	start := p.pos
	p.pos++
	var b strings.Builder
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errorf(start, "unterminated regular expression")
		}
		c := p.src[p.pos]
		if c == '/' {
			p.pos++
			break
		}
		if c == '\\' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '/' {
			b.WriteByte('/')
			p.pos += 2
			continue
		}
		if c == '\\' && p.pos+1 < len(p.src) {
			b.WriteString(p.src[p.pos : p.pos+2])
			p.pos += 2
			continue
		}
		b.WriteByte(c)
		p.pos++
	}
	if p.pos < len(p.src) && p.src[p.pos] >= 'a' && p.src[p.pos] <= 'z' {
		return nil, p.errorf(p.pos, "regular expression flags (/.../%c) are not supported", p.src[p.pos])
	}
	g, err := ParseRegex(b.String())
	if err != nil {
		return nil, p.errorf(start, "%v", err)
	}
	return g.rules[0].body, nil
}

// intersperse lets the %ignore item repeat between the items of every parser rule.
func (p *ebnfParser) intersperse() {
	ign := repeatNode(p.ignore, 0, -1)
	var walk func(n *node) *node
	walk = func(n *node) *node {
		switch n.op {
		case opConcat:
			out := &node{op: opConcat}
			for i, s := range n.subs {
				if i > 0 {
					out.subs = append(out.subs, ign)
				}
				out.subs = append(out.subs, walk(s))
			}
			return out
		case opAlt:
			out := &node{op: opAlt}
			for _, s := range n.subs {
				out.subs = append(out.subs, walk(s))
			}
			return out
		case opRepeat:
			sub := walk(n.subs[0])
			if n.max == 0 || n.max == 1 {
				return repeatNode(sub, n.min, n.max)
			}
			// x{m,n} becomes x (ign x){m-1,n-1}
			rest := repeatNode(concatNode(ign, sub), max(n.min-1, 0), n.max-1)
			if n.max < 0 {
				rest.max = -1
			}
			if n.min == 0 {
				return repeatNode(concatNode(sub, rest), 0, 1)
			}
			return concatNode(sub, rest)
		}
		return n
	}
	for i := range p.g.rules {
		if p.parserRule[i] {
			p.g.rules[i].body = walk(p.g.rules[i].body)
		}
	}
}
