package jsonschema

import (
	"strings"
	"testing"
)

// TestJSONObjectGBNF checks the json_object grammar with the grammar engine's matcher:
// objects only, nesting bounded when asked, whitespace as the option says.
func TestJSONObjectGBNF(t *testing.T) {
	cases := []struct {
		opt   Options
		depth int
		in    string
		want  bool
	}{
		{Options{}, 0, `{}`, true},
		{Options{}, 0, `{"a":[1,{"b":null}],"c":"d"}`, true},
		{Options{}, 0, `[1]`, false},
		{Options{}, 0, `"x"`, false},
		{Options{}, 0, `{"a": 1}`, false}, // compact: no whitespace
		{Options{WhitespacePattern: `[ \n]{0,4}`}, 0, "{ \"a\": 1,\n \"b\" : [ ] }", true},
		{Options{WhitespacePattern: `[ \n]{0,4}`}, 0, "{\"a\":      1}", false},
		{Options{}, 1, `{"a":1,"b":"c"}`, true},
		{Options{}, 1, `{"a":{}}`, false},
		{Options{}, 2, `{"a":{"b":[]}}`, false},
		{Options{}, 3, `{"a":{"b":[1,true]}}`, true},
		{Options{}, 3, `{"a":{"b":[[1]]}}`, false},
	}
	for _, tc := range cases {
		g, err := JSONObjectGBNF(tc.opt, tc.depth)
		if err != nil {
			t.Fatal(err)
		}
		match, err := compileMatcher(g)
		if err != nil {
			t.Fatal(err)
		}
		if got := match(tc.in); got != tc.want {
			t.Errorf("depth %d, ws %q: %s matched %v, want %v\n%s", tc.depth, tc.opt.WhitespacePattern, tc.in, got, tc.want, g)
		}
	}
	if _, err := JSONObjectGBNF(Options{WhitespacePattern: `\s*`}, 0); err == nil || !strings.Contains(err.Error(), "unbounded") {
		t.Errorf("an unbounded whitespace pattern gave %v, want an error saying unbounded", err)
	}
}
