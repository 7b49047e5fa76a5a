package structured

import "testing"

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
