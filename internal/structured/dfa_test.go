package structured

import (
	"slices"
	"strings"
	"testing"
)

// TestMinimalDFA checks state counts against the textbook minimal automata (the dead
// state included).
func TestMinimalDFA(t *testing.T) {
	cases := []struct {
		re     string
		states int
	}{
		{`(a|b)*abb`, 5},           // the dragon book's example: 4 states
		{`[ab]*a[ab]{2}`, 9},       // the 3rd symbol from the end is a: 2^3 states
		{`x(ab|cd)*|x(ab|cd)*`, 5}, // duplicated alternatives merge: x, loop, after a, after c
		// three copies of a string body merge into one: dead, before the quote, the body,
		// after the closing quote, and the 7 states inside a multi-byte UTF-8 character
		// (after a 2-, 3- or 4-byte lead; after E0, ED, F0 or F4, whose second byte is
		// narrower)
		{`"(a[^"]*|b[^"]*|[^ab"][^"]*)?"`, 11},
	}
	for _, tc := range cases {
		g, err := ParseRegex(tc.re)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Compile(g, DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if got := c.terms[0].numStates(); got != tc.states {
			t.Errorf("%s: %d states, want %d", tc.re, got, tc.states)
		}
	}
}

// TestWithinEquivalence: states withinEquivalence puts in one class have the same lexeme
// entry (the same tokens and the same end nodes, from a walk of the whole trie), and the
// states of long counted repetitions do fall into few classes.
func TestWithinEquivalence(t *testing.T) {
	v := smallVocab()
	trie, err := NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`[a-c]{0,40}x`, `"[^"]{0,30}"`, `(ab){2,20}c?`, `[0-9]{3,12}(\.[0-9]{1,9})?`, `(a|b)*abb`} {
		g, err := ParseRegex(re)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Compile(g, DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		d := c.terms[0]
		reps := withinEquivalence(d, trie.maxDepth)
		tg := NewTokenGrammar(c, trie, v)
		classes := map[uint32]bool{}
		for q := range uint32(d.numStates()) {
			classes[reps[q]] = true
			a, b := tg.walkLexeme(d, q, nil), tg.walkLexeme(d, reps[q], nil)
			if !slices.Equal(a.ids, b.ids) || !slices.Equal(a.dense, b.dense) || !slices.Equal(a.ends, b.ends) {
				t.Errorf("%s: state %d and its representative %d differ: %v %v / %v %v", re, q, reps[q], a.ids, a.ends, b.ids, b.ends)
			}
		}
		t.Logf("%s: %d states, %d classes within %d bytes", re, d.numStates(), len(classes), trie.maxDepth)
		if d.numStates() > 40 && 3*len(classes) > d.numStates() {
			t.Errorf("%s: %d states in %d classes", re, d.numStates(), len(classes))
		}
	}
}

// TestCountedRepetitionOneTerminal: a counted repetition of a mid-sized body beside a
// recursive rule (a JSON string of maxLength 64 inside an object) is one terminal, not a
// chain of one parser rule per count (whose lexeme ends made masks take seconds), and
// still matches exactly the counts allowed.
func TestCountedRepetitionOneTerminal(t *testing.T) {
	// ten 4-byte alternatives: 40 leaves, 64 copies expanded are over LexemeSize
	c := mustGBNF(t, `root ::= "[" body "]" | "(" root ")"
body ::= ("abcd" | "efgh" | "ijkl" | "mnop" | "qrst" | "uvwx" | "yzAB" | "CDEF" | "GHIJ" | "KLMN"){1,64}`)
	if c.NumRules() > 8 {
		t.Errorf("%d parser rules, want the repetition inside one terminal", c.NumRules())
	}
	for _, tc := range []struct {
		n    int
		want bool
	}{{0, false}, {1, true}, {63, true}, {64, true}, {65, false}} {
		s := "((" + "[" + strings.Repeat("efgh", tc.n) + "]" + "))"
		if got := c.Matches(s); got != tc.want {
			t.Errorf("%d copies: Matches = %v, want %v", tc.n, got, tc.want)
		}
	}
	if c.Matches("[" + strings.Repeat("efgh", 10) + "efg]") {
		t.Error("a partial copy matched")
	}
}
