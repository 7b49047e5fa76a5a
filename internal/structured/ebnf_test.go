package structured

import (
	"strings"
	"testing"
)

func mustEBNF(t testing.TB, src string) *Compiled {
	t.Helper()
	g, err := ParseEBNF(src)
	return mustCompile(t, g, err)
}

const jsonEBNF = `
?start: value
?value: object
      | array
      | ESCAPED_STRING
      | SIGNED_NUMBER      -> number
      | "true" | "false" | "null"
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : ESCAPED_STRING ":" value   // a key and its value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%ignore " "
`

func TestEBNFMatches(t *testing.T) {
	cases := []struct {
		src     string
		yes, no []string
	}{
		{jsonEBNF,
			[]string{`{}`, `{"a": [1, -2.5e3, "x"]}`, ` { "a" : { } } `, `[true,false,null]`, `"s"`},
			[]string{`{`, `{"a"}`, `[1,]`, "{\n}", `tru`}},
		{"start: A B? C~2..3\nA: /a+/\nB: \"b\"\nC: \"c\"", []string{"acc", "aabccc"}, []string{"ac", "abcccc", "bcc"}},
		{"start: x+\nx: \"(\" x* \")\"", []string{"()", "(())()"}, []string{"(", ")("}},
		{"start: WORD (\",\" WORD)~1\n%import common.WORD\n%ignore /[ \\t]+/", []string{"ab,cd", "ab , cd", " ab,cd "}, []string{"ab", "ab,cd,ef"}},
		{"start: \"a\" /[0-9]{2}\\//", []string{"a12/"}, []string{"a12", "a1/"}},
	}
	for _, tc := range cases {
		checkMatches(t, mustEBNF(t, tc.src), tc.src, tc.yes, tc.no)
	}
}

func TestEBNFErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"start: x", "line 1:8: undefined name \"x\""},
		{"rule: \"a\"", "no rule named start"},
		{"start: \"a\"i", "case-insensitive"},
		{"start: /a/i", "flags"},
		{"start: /a(?=b)/", "line 1:8: regex: offset 1: lookaround"},
		{"%import other.X\nstart: X", "only common.NAME"},
		{"%declare X\nstart: \"a\"", "directive %declare is not supported"},
		{"start: sep{x}", "templates"},
		{"start: (\"a\"", "unclosed '('"},
		{"start: \"a\" ~ 3..1", "max below min"},
		{"start: \"a\"\nstart: \"b\"", "line 2:1: \"start\" defined twice"},
		{"start: " + strings.Repeat("[", 1100), "nested more than 1000 deep"},
	}
	for _, tc := range cases {
		_, err := ParseEBNF(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

func FuzzParseEBNF(f *testing.F) {
	f.Add(jsonEBNF, `{"a": 1}`)
	f.Add("start: A B? C~2..3\nA: /a+/\nB: \"b\"\nC: \"c\"", "abcc")
	f.Fuzz(func(t *testing.T, src, input string) {
		g, err := ParseEBNF(src)
		fuzzCompiled(t, g, err, input)
	})
}

func TestMaskerEBNF(t *testing.T) {
	c := mustEBNF(t, jsonEBNF)
	total := 0
	for seed := range uint64(8) {
		total += checkGeneration(t, "ebnf-json", c, smallVocab(), 50, seed)
	}
	requireSteps(t, total, 20)
}
