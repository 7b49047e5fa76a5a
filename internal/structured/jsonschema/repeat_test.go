package jsonschema

import (
	"strings"
	"testing"
)

// TestRepeatCounts checks the nested form of large repetition counts against the counts
// themselves, with the grammar engine's matcher.
func TestRepeatCounts(t *testing.T) {
	cases := [][2]int{{0, 1500}, {1200, 1200}, {3, 2345}, {1001, -1}, {0, 1001}}
	for _, tc := range cases {
		g := grammar{names: []string{"root"}, rules: map[string]expr{"root": repeat(lit("a"), tc[0], tc[1])}}
		match, err := compileMatcher(g.writeGBNF())
		if err != nil {
			t.Fatal(err)
		}
		top := tc[1]
		if top < 0 {
			top = tc[0] + 50
		}
		for _, n := range []int{0, 1, tc[0] - 1, tc[0], tc[0] + 1, top - 1, top, top + 1, 999, 1000, 1001} {
			if n < 0 {
				continue
			}
			want := n >= tc[0] && (tc[1] < 0 || n <= tc[1])
			if got := match(strings.Repeat("a", n)); got != want {
				t.Errorf("a{%d,%d} on %d a's: matched %v, want %v", tc[0], tc[1], n, got, want)
			}
		}
	}
}
