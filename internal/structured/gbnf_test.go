package structured

import (
	"os"
	"strings"
	"testing"
)

func mustGBNF(t testing.TB, src string) *Compiled {
	t.Helper()
	g, err := ParseGBNF(src)
	return mustCompile(t, g, err)
}

// mustCompile compiles a grammar parsed with err, failing the test on any error.
func mustCompile(t testing.TB, g *Grammar, err error) *Compiled {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(g, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGBNFMatches(t *testing.T) {
	cases := []struct {
		src string
		yes []string
		no  []string
	}{
		{jsonGBNF,
			[]string{`{}`, `{"a":1}`, `{"a": [1, 2.5, "x\n", {"b": null}]}`, `{"k":"\u00e9é"} `, `{"a":{"b":{"c":[[[]]]}}}`},
			[]string{``, `{`, `{"a"}`, `[1]`, `{"a":01}`, `{"a":1}     `, "{\"a\":\"\x01\"}", `{"a":tru}`}},
		{`root ::= "a"{2,3} "b"?`, []string{"aa", "aaa", "aab", "aaab"}, []string{"a", "aaaa", "b", "aabb"}},
		{`root ::= x{2}  x ::= "a" | "bc"`, []string{"aa", "abc", "bcbc", "bca"}, []string{"a", "bc", "aaa"}},
		{`root ::= [^a-c]+`, []string{"d", "é", "日本", "\U0001F600"}, []string{"a", "da", "", "\xff", "\xc3"}},
		{`root ::= .`, []string{"a", "é", "\U0001F600"}, []string{"", "ab", "\xed\xa0\x80"}},
		{"root ::= \"\\x41\\u00e9\\t\" [\\]\\-]", []string{"Aé\t]", "Aé\t-"}, []string{"Aé\t\\"}},
		// left and right recursion, nullable rules
		{`root ::= l  l ::= l "a" | ""`, []string{"", "a", "aaaa"}, []string{"b"}},
		{`root ::= r  r ::= "a" r | ""`, []string{"", "a", "aaaa"}, []string{"ab"}},
		{`root ::= e   e ::= e "+" t | t   t ::= "(" e ")" | "x"`, []string{"x", "x+x", "(x+(x))+x"}, []string{"x+", "(x", "xx"}},
		{`root ::= a b a  a ::= "x"?  b ::= "y"*`, []string{"", "x", "xyx", "yyy", "xx"}, []string{"xxx", "yxy x"}},
	}
	for _, tc := range cases {
		checkMatches(t, mustGBNF(t, tc.src), tc.src, tc.yes, tc.no)
	}
}

// checkMatches checks that c matches every string of yes and none of no.
func checkMatches(t *testing.T, c *Compiled, name string, yes, no []string) {
	t.Helper()
	for _, s := range yes {
		if !c.Matches(s) {
			t.Errorf("%.40q: %q not matched", name, s)
		}
	}
	for _, s := range no {
		if c.Matches(s) {
			t.Errorf("%.40q: %q matched", name, s)
		}
	}
}

func TestGBNFErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{`root ::= "a`, "line 1:10: unterminated string literal"},
		{"root ::= x", "line 1:10: undefined rule \"x\""},
		{"a ::= \"x\"", "no rule named root"},
		{"root ::= \"a\"\nroot ::= \"b\"", "line 2:1: rule \"root\" defined twice"},
		{"root ::= [b-a]", "reversed"},
		{"root ::= \"a\"{3,2}", "max below min"},
		{"root ::= \"a\"{99999}", "over the limit"},
		{"root ::= (\"a\"", "unclosed '('"},
		{"root ::= \"\\q\"", "unknown escape \\q"},
		{"root ::= ::=", "line 1:10: unexpected ':'"},
		{"root ::= [a", "unterminated character class"},
		{"root ::= " + strings.Repeat("(", 1100), "nested more than 1000 deep"},
	}
	for _, tc := range cases {
		_, err := ParseGBNF(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// jsonGBNF is the JSON grammar of testdata/grammars/json.gbnf.
var jsonGBNF = func() string {
	b, err := os.ReadFile("testdata/grammars/json.gbnf")
	if err != nil {
		panic(err)
	}
	return string(b)
}()
