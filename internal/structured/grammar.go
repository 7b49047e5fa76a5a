package structured

import (
	"fmt"
	"strings"
)

// Grammar is a context-free grammar over bytes, the form every front end (GBNF, regex,
// choice, EBNF) produces. Each rule's right-hand side is an expression of byte sets,
// sequences, alternatives, bounded or unbounded repetition and references to rules; the
// language is the set of byte strings the start rule derives. A Grammar is immutable once
// built and may be compiled for any number of tokenizers.
type Grammar struct {
	rules []rule
	start int
}

// rule is one named rule of a Grammar.
type rule struct {
	name string
	body *node
	pos  string // where it was defined, for messages ("line 3:1"); may be empty
}

// NumRules returns the number of rules (helper rules of a front end included).
func (g *Grammar) NumRules() int { return len(g.rules) }

// Matches reports whether s is in the grammar's language, compiling the grammar with
// DefaultLimits; it is meant for tests and tools (compile once with Compile to match many).
func (g *Grammar) Matches(s string) (bool, error) {
	c, err := Compile(g, DefaultLimits())
	if err != nil {
		return false, err
	}
	return c.Matches(s), nil
}

// String prints the grammar, one rule a line, in an internal regex-like notation.
func (g *Grammar) String() string {
	var b strings.Builder
	for i, r := range g.rules {
		fmt.Fprintf(&b, "<%d> %s ::= %s\n", i, r.name, r.body)
	}
	return b.String()
}
