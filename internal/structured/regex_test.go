package structured

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestRegexAgainstGo compares the compiled regex with Go's regexp package (anchored at
// both ends) on random strings over a small alphabet.
func TestRegexAgainstGo(t *testing.T) {
	patterns := []string{
		`a*b+c?`, `(ab|cd)*e`, `[a-c]{2,3}`, `x{2}`, `(a|b){0,3}c`, `\d+(\.\d+)?`, `[^ab]*`,
		`(?:ab)+|c`, `\w+@\w+\.com`, `.{1,2}`, `[\d\-]+`, `a(?P<x>b|c)d`, `^ab$`, `a{2,}`,
		`[é-ü]+`, `(a*)*`, `a+?b*?`, `[\]a]+`, `-?(0|[1-9]\d*)`, `a|`, `()`,
	}
	alphabet := []string{"a", "b", "c", "d", "e", "x", "1", "0", ".", "-", "@", "é", "ü", "ß", "\n", "]", "A"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pat := range patterns {
		g, err := ParseRegex(pat)
		if err != nil {
			t.Fatalf("%q: %v", pat, err)
		}
		c, err := Compile(g, DefaultLimits())
		if err != nil {
			t.Fatalf("%q: %v", pat, err)
		}
		core := strings.TrimSuffix(strings.TrimPrefix(pat, "^"), "$")
		ref := regexp.MustCompile(`^(?:` + core + `)$`)
		for range 400 {
			var b strings.Builder
			for range rng.IntN(6) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			if got, want := c.Matches(s), ref.MatchString(s); got != want {
				t.Errorf("%q on %q: matched %v, Go's regexp says %v", pat, s, got, want)
			}
		}
	}
}

func TestRegexErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{`(a)\1`, "offset 3: backreference \\1 is not supported"},
		{`a(?=b)`, "offset 1: lookaround"},
		{`(?<!a)b`, "lookaround"},
		{`\bword`, "word boundary"},
		{`a^b`, "offset 1: '^' is supported only at the start"},
		{`a$b`, "'$' is supported only at the end"},
		{`(?i)a`, "group flags"},
		{`\p{L}`, "Unicode property"},
		{`a++`, "possessive"},
		{`(ab`, "offset 0: unclosed '('"},
		{`ab)`, "offset 2: unmatched ')'"},
		{`*a`, "nothing to repeat"},
		{`[a`, "unterminated character class"},
		{`a{3,1}`, "max below min"},
		{`\q`, "unknown escape"},
		{strings.Repeat("(", 1100), "nested more than 1000 deep"},
	}
	for _, tc := range cases {
		_, err := ParseRegex(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

func TestChoice(t *testing.T) {
	g, err := Choice([]string{"yes", "no", "maybe so", ""})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(g, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"yes": true, "no": true, "maybe so": true, "": true, "ye": false, "yesno": false, "maybe": false} {
		if c.Matches(s) != want {
			t.Errorf("%q: matched %v, want %v", s, !want, want)
		}
	}
	if _, err := Choice(nil); err == nil {
		t.Error("an empty choice list compiled")
	}
}
