package jsonschema

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// expr is one node of the grammar the compiler builds before it writes GBNF text. Every
// node matches a set of byte strings; the GBNF writer renders each kind with the matching
// llama.cpp operator.
type expr interface{ isExpr() }

// lit matches its text exactly.
type lit string

// class matches one character (code point) inside one of its ranges, or outside all of them
// when negated.
type class struct {
	ranges  []runeRange
	negated bool
}

// runeRange is the closed range of code points lo..hi.
type runeRange struct{ lo, hi rune }

// seq matches its parts one after another.
type seq []expr

// alt matches any one of its choices.
type alt []expr

// rep matches e between min and max times; max < 0 means no upper bound.
type rep struct {
	e        expr
	min, max int
}

// ref matches the rule it names.
type ref string

func (lit) isExpr()   {}
func (class) isExpr() {}
func (seq) isExpr()   {}
func (alt) isExpr()   {}
func (rep) isExpr()   {}
func (ref) isExpr()   {}

// empty matches the empty string.
var empty = seq(nil)

// grammar is a set of named rules; root is the start rule.
type grammar struct {
	names []string // in the order they were defined, root first
	rules map[string]expr
}

// newSeq builds a sequence, dropping empty parts and flattening nested sequences.
func newSeq(parts ...expr) expr {
	var out seq
	for _, p := range parts {
		switch p := p.(type) {
		case seq:
			out = append(out, p...)
		case lit:
			if p == "" {
				continue
			}
			if n := len(out); n > 0 {
				if prev, ok := out[n-1].(lit); ok {
					out[n-1] = prev + p
					continue
				}
			}
			out = append(out, p)
		default:
			out = append(out, p)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}

// newAlt builds a choice, flattening nested choices; a single choice is returned as is,
// and no choice at all is nil (nothing matches).
func newAlt(choices ...expr) expr {
	var out alt
	for _, c := range choices {
		if a, ok := c.(alt); ok {
			out = append(out, a...)
			continue
		}
		out = append(out, c)
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

// maxCountedRepeat is the largest repetition count written as one {m,n}; larger counts
// are written as nested repetitions (GBNF parsers cap counts, and large counts make large
// automata). It is also the block of the nested form: a JSON string's block of 400
// characters is one terminal of the grammar engine, whose counting states share cached
// masks while more than a token's length (128 bytes in Llama 3) is left in the block.
const maxCountedRepeat = 400

// repeat matches e between min and max times (max < 0: unbounded), writing counts above
// maxCountedRepeat exactly as nested repetitions of blocks of maxCountedRepeat.
func repeat(e expr, min, max int) expr {
	if min <= maxCountedRepeat && max <= maxCountedRepeat {
		return rep{e: e, min: min, max: max}
	}
	const block = maxCountedRepeat
	blocks := func(lo, hi int) expr { return repeat(rep{e: e, min: block, max: block}, lo, hi) }
	switch {
	case min == max:
		return newSeq(blocks(min/block, min/block), rep{e: e, min: min % block, max: min % block})
	case max < 0:
		return newSeq(repeat(e, min, min), rep{e: e, min: 0, max: -1})
	case min > 0:
		return newSeq(repeat(e, min, min), repeat(e, 0, max-min))
	}
	// 0..max = (e{100}){0,k-1} e{0,99} | (e{100}){k} e{0,max%100}, k = max/100.
	k := max / block
	return newAlt(
		newSeq(blocks(0, k-1), rep{e: e, min: 0, max: block - 1}),
		newSeq(blocks(k, k), rep{e: e, min: 0, max: max % block}),
	)
}

// opt matches e or nothing.
func opt(e expr) expr { return rep{e: e, min: 0, max: 1} }

// writeGBNF renders g in llama.cpp's GBNF dialect, one rule a line, root first.
func (g *grammar) writeGBNF() string {
	var b strings.Builder
	for _, name := range g.names {
		b.WriteString(name)
		b.WriteString(" ::= ")
		writeExpr(&b, g.rules[name], false)
		b.WriteByte('\n')
	}
	return b.String()
}

// writeExpr writes e; inSeq says e is an item of a sequence or repetition, where a choice
// needs parentheses.
func writeExpr(b *strings.Builder, e expr, inSeq bool) {
	switch e := e.(type) {
	case lit:
		writeLiteral(b, string(e))
	case class:
		writeClass(b, e)
	case ref:
		b.WriteString(string(e))
	case seq:
		if len(e) == 0 {
			b.WriteString(`""`)
			return
		}
		if inSeq && len(e) > 1 {
			b.WriteByte('(')
		}
		for i, p := range e {
			if i > 0 {
				b.WriteByte(' ')
			}
			writeExpr(b, p, true)
		}
		if inSeq && len(e) > 1 {
			b.WriteByte(')')
		}
	case alt:
		if inSeq {
			b.WriteByte('(')
		}
		for i, c := range e {
			if i > 0 {
				b.WriteString(" | ")
			}
			writeExpr(b, c, false)
		}
		if inSeq {
			b.WriteByte(')')
		}
	case rep:
		b.WriteByte('(')
		writeExpr(b, e.e, false)
		b.WriteByte(')')
		switch {
		case e.min == 0 && e.max == 1:
			b.WriteByte('?')
		case e.min == 0 && e.max < 0:
			b.WriteByte('*')
		case e.min == 1 && e.max < 0:
			b.WriteByte('+')
		case e.max < 0:
			fmt.Fprintf(b, "{%d,}", e.min)
		case e.min == e.max:
			fmt.Fprintf(b, "{%d}", e.min)
		default:
			fmt.Fprintf(b, "{%d,%d}", e.min, e.max)
		}
	default:
		panic(fmt.Sprintf("jsonschema: unknown grammar node %T", e))
	}
}

// writeLiteral writes s as a GBNF string literal.
func writeLiteral(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			writeRune(b, r)
		}
	}
	b.WriteByte('"')
}

// writeClass writes c as a GBNF character class.
func writeClass(b *strings.Builder, c class) {
	if c.negated && len(c.ranges) == 0 {
		b.WriteString(`[\x00-\U0010FFFF]`) // any character
		return
	}
	b.WriteByte('[')
	if c.negated {
		b.WriteByte('^')
	}
	for _, r := range c.ranges {
		writeClassRune(b, r.lo)
		if r.hi != r.lo {
			b.WriteByte('-')
			writeClassRune(b, r.hi)
		}
	}
	b.WriteByte(']')
}

func writeClassRune(b *strings.Builder, r rune) {
	switch r {
	case ']', '[', '-', '^', '\\':
		b.WriteByte('\\')
		b.WriteRune(r)
	default:
		writeRune(b, r)
	}
}

// writeRune writes r, escaping control characters and anything that is not printable
// ASCII as \xHH, \uHHHH or \UHHHHHHHH so the grammar text stays plain ASCII.
func writeRune(b *strings.Builder, r rune) {
	switch {
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r == '\t':
		b.WriteString(`\t`)
	case r >= 0x20 && r < 0x7f:
		b.WriteRune(r)
	case r < 0x80:
		fmt.Fprintf(b, `\x%02X`, r)
	case r <= 0xffff:
		fmt.Fprintf(b, `\u%04X`, r)
	default:
		fmt.Fprintf(b, `\U%08X`, r)
	}
}

// ruleName turns a JSON pointer into a GBNF rule name (letters, digits and dashes).
func ruleName(ptr string) string {
	var b strings.Builder
	for _, r := range ptr {
		switch {
		case r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'):
			b.WriteRune(r)
		default:
			if s := b.String(); len(s) > 0 && s[len(s)-1] != '-' {
				b.WriteByte('-')
			}
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == "" {
		s = "schema"
	}
	if len(s) > 60 {
		s = s[len(s)-60:]
		s = strings.TrimLeft(s, "-")
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "r" + s
	}
	return s
}

// checkProgress refuses a grammar in which a rule can reach itself without matching a
// character (left recursion, as from a schema that is its own $ref): a matcher would loop.
func (g *grammar) checkProgress() error {
	nullable := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, name := range g.names {
			if !nullable[name] && g.nullable(g.rules[name], nullable) {
				nullable[name], changed = true, true
			}
		}
	}
	// state: 0 unvisited, 1 on the current path, 2 finished.
	state := map[string]int{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("json schema: a $ref cycle matches nothing before recurring (rules %s)", strings.Join(append(path, name), " -> "))
		case 2:
			return nil
		}
		state[name] = 1
		for _, next := range g.leftRefs(g.rules[name], nullable, nil) {
			if err := visit(next, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		return nil
	}
	for _, name := range g.names {
		if err := visit(name, nil); err != nil {
			return err
		}
	}
	return nil
}

// nullable reports whether e can match the empty string, given what is known of the rules.
func (g *grammar) nullable(e expr, rules map[string]bool) bool {
	switch e := e.(type) {
	case lit:
		return e == ""
	case class:
		return false
	case ref:
		return rules[string(e)]
	case seq:
		for _, p := range e {
			if !g.nullable(p, rules) {
				return false
			}
		}
		return true
	case alt:
		for _, p := range e {
			if g.nullable(p, rules) {
				return true
			}
		}
		return false
	case rep:
		return e.min == 0 || g.nullable(e.e, rules)
	}
	return false
}

// leftRefs appends the rules e may start with before matching any character.
func (g *grammar) leftRefs(e expr, nullable map[string]bool, out []string) []string {
	switch e := e.(type) {
	case ref:
		return append(out, string(e))
	case seq:
		for _, p := range e {
			out = g.leftRefs(p, nullable, out)
			if !g.nullable(p, nullable) {
				break
			}
		}
	case alt:
		for _, p := range e {
			out = g.leftRefs(p, nullable, out)
		}
	case rep:
		if e.max != 0 {
			out = g.leftRefs(e.e, nullable, out)
		}
	}
	return out
}

// prune drops the rules the start rule cannot reach.
func (g *grammar) prune(start string) {
	reached := map[string]bool{}
	var walk func(e expr)
	walk = func(e expr) {
		switch e := e.(type) {
		case ref:
			if !reached[string(e)] {
				reached[string(e)] = true
				walk(g.rules[string(e)])
			}
		case seq:
			for _, p := range e {
				walk(p)
			}
		case alt:
			for _, p := range e {
				walk(p)
			}
		case rep:
			walk(e.e)
		}
	}
	walk(ref(start))
	g.names = slices.DeleteFunc(g.names, func(n string) bool { return !reached[n] })
	for n := range g.rules {
		if !reached[n] {
			delete(g.rules, n)
		}
	}
}
