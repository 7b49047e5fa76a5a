package structured

import (
	"testing"
	"time"
)

// TestDirectAgainstSubset: for expressions that exercise the direct build's cases (merged
// alternatives, loops inside loops, loop bodies that may be empty, a loop followed by what
// its body begins with, counted strings, an empty byte set), the direct build succeeds and
// its minimized automaton is the subset construction's, state for state.
func TestDirectAgainstSubset(t *testing.T) {
	lim := DefaultLimits()
	lim.Time = time.Minute
	for _, src := range []string{
		`root ::= "ab" | "ac" | "a" | "b"`,
		`root ::= [a-z]+ (" " [a-z]+)* ":"`,
		`root ::= ("a" | "ab")* "b"`,
		`root ::= ("x" "y"?)* "x"`,
		`root ::= ("a"* "b")* "a"*`,
		`root ::= (("a" | "") "b")* "c"`,
		`root ::= ("a" ("b" | "c")*)* ("a" | "b")*`,
		`root ::= "\"" (char){0,40} "\"" ("," "\"" (char)* "\"")*` + "\n" + benchChar,
		`root ::= ([0-9A-Za-z] ([0-9A-Za-z-]){0,30} [0-9A-Za-z])? ("." [0-9A-Za-z] ([0-9A-Za-z-]){0,30})*`,
		`root ::= "red" | "reed" | "gr" [a-e]{1,3} | "green" ([0-9]){0,2}`,
		`root ::= "a" [^\x00-\xff] | "b"`,
		`root ::= ("ab" | "a"){2,5} "b"?`,
		`root ::= "a"* "b" | "ac" | ("c"* "d")* "e"`,
	} {
		g, err := ParseGBNF(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		c, err := compile(g, lim, false)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		lw := &lowering{g: g, lim: lim, deadline: time.Now().Add(time.Minute),
			inlined: make([]*node, len(g.rules))}
		for i, want := range c.terms {
			frags := newFragments(lim.NFAStates, lim.DFAStates, lw.check)
			lw.frags = frags
			e := lw.inline(c.termExpr[i])
			raw, err := directDFA(e, frags, lim.NFAStates, lw.check)
			if err != nil {
				t.Errorf("%s: terminal %d: direct build: %v", src, i, err)
				continue
			}
			got := minimize(raw)
			if dfaFingerprint(got) != dfaFingerprint(want) {
				t.Errorf("%s: terminal %d: direct %s, subset construction %s", src, i, dfaFingerprint(got), dfaFingerprint(want))
			}
			if got.stable != want.stable {
				t.Errorf("%s: terminal %d: stable after %d rounds, subset construction %d", src, i, got.stable, want.stable)
			}
		}
	}
}
