package structured

import (
	"testing"
	"time"
)

// fuzzLimits keeps fuzzed compiles small and quick.
func fuzzLimits() Limits {
	return Limits{Time: 200 * time.Millisecond, Rules: 2000, NFAStates: 20000, DFAStates: 2000,
		TotalDFAStates: 20000, LexemeSize: 500}
}

// FuzzParseGBNF checks that any grammar text either fails with an error or compiles to a
// matcher that can be fed any input, without panics; and that Forced bytes are accepted.
func FuzzParseGBNF(f *testing.F) {
	for _, src := range testGrammars {
		f.Add(src, `{"a": [1, true]}`)
	}
	f.Add(`root ::= [^"\\\x00-\x1F]{0,3} "\u00e9" .`, "ab\u00e9x")
	f.Add("root ::= a{2,} | b?\na ::= \"x\" # c\nb ::= (a | \"y\")*", "xxy")
	f.Fuzz(func(t *testing.T, src, input string) {
		g, err := ParseGBNF(src)
		fuzzCompiled(t, g, err, input)
	})
}

// FuzzParseRegex is FuzzParseGBNF for regular expressions.
func FuzzParseRegex(f *testing.F) {
	for _, s := range []string{`a*b+c?`, `(ab|cd){2,3}e$`, `^[^a-c\d]+\.\w{1,}`, `(?:x|y)*?z`, `\u{1F600}|é|[\x00-\x1f]`} {
		f.Add(s, "abcde")
	}
	f.Fuzz(func(t *testing.T, src, input string) {
		g, err := ParseRegex(src)
		fuzzCompiled(t, g, err, input)
	})
}

// fuzzCompiled compiles a parsed grammar (err: the parse failed) and checks its matcher.
func fuzzCompiled(t *testing.T, g *Grammar, err error, input string) {
	if err != nil {
		return
	}
	c, err := Compile(g, fuzzLimits())
	if err != nil {
		return
	}
	fuzzMatcher(t, c, input)
}

// fuzzMatcher feeds input and checks the matcher's invariants on the way.
func fuzzMatcher(t *testing.T, c *Compiled, input string) {
	m := c.NewMatcher()
	forced := m.Forced(16)
	probe := m.Clone()
	if !probe.AcceptString(string(forced)) {
		t.Fatalf("forced bytes %q refused", forced)
	}
	for i := 0; i < len(input); i++ {
		if !m.AcceptByte(input[i]) {
			if m.Len() != i {
				t.Fatalf("a refused byte changed the matcher")
			}
			break
		}
		if !m.CanContinue() && !m.Accepting() {
			t.Fatalf("dead state after %q", input[:i+1])
		}
	}
	if m.Accepting() != c.Matches(string(m.input)) {
		t.Fatalf("Accepting and Matches disagree on %q", m.input)
	}
}
