package structured

import (
	"fmt"
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
		reps := withinEquivalence(d, trie.maxDepth, -1)
		tg := NewTokenGrammar(c, trie, v)
		classes := map[uint32]bool{}
		for q := range uint32(d.numStates()) {
			classes[reps[q]] = true
			a, b := tg.walkLexeme(0, q, nil), tg.walkLexeme(0, reps[q], nil)
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

// mooreBlocks is Moore's partition refinement as the textbook states it, the reference of
// refine: every round recomputes every state's signature over the blocks of the round
// before, for at most rounds rounds (rounds < 0: until stable).
func mooreBlocks(d *dfa, rounds int) []uint32 {
	n := d.numStates()
	block := make([]uint32, n)
	for q := range n {
		switch {
		case q == 0:
			block[q] = 0
		case d.accept[q]:
			block[q] = 1
		default:
			block[q] = 2
		}
	}
	count := func(b []uint32) int {
		seen := map[uint32]bool{}
		for _, x := range b {
			seen[x] = true
		}
		return len(seen)
	}
	for round := 0; rounds < 0 || round < rounds; round++ {
		index := map[string]uint32{}
		fresh := make([]uint32, n)
		for q := range n {
			key := fmt.Sprint(block[q])
			for c := range d.nclass {
				key += "," + fmt.Sprint(block[d.next[q*d.nclass+c]])
			}
			id, ok := index[key]
			if !ok {
				id = uint32(len(index))
				index[key] = id
			}
			fresh[q] = id
		}
		stable := count(fresh) == count(block)
		block = fresh
		if stable {
			break
		}
	}
	return block
}

// samePartition reports whether two block assignments put the same states together.
func samePartition(a, b []uint32) bool {
	ab, ba := map[uint32]uint32{}, map[uint32]uint32{}
	for q := range a {
		if x, ok := ab[a[q]]; ok && x != b[q] {
			return false
		}
		if x, ok := ba[b[q]]; ok && x != a[q] {
			return false
		}
		ab[a[q]], ba[b[q]] = b[q], a[q]
	}
	return true
}

// TestRefineAgainstMoore: the incremental refinement gives Moore's partition after every
// number of rounds and at the fixed point, on unminimized automata (as the subset
// construction leaves them) of counted repetitions, loops and alternatives.
func TestRefineAgainstMoore(t *testing.T) {
	res := []string{`[a-c]{0,40}x`, `"[^"]{0,30}"`, `(ab){2,20}c?`, `[0-9]{3,12}(\.[0-9]{1,9})?`,
		`(a|b)*abb`, `[ab]*a[ab]{4}`, `x(ab|cd)*|x(ab|cd)*`, `("(a|é|\\u[0-9a-f]{4}){0,50}"|[0-9]{1,20}|null)`,
		`(abc|abd|ab){1,15}(x|y)?`, `[^"]{0,10}"(,[^"]{0,3}")*`}
	for _, re := range res {
		g, err := ParseRegex(re)
		if err != nil {
			t.Fatal(err)
		}
		e := (&lowering{g: g}).inline(g.rules[g.start].body)
		raw, err := determinize(e, 1<<20, 1<<20, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		for _, rounds := range []int{0, 1, 2, 3, 7, 20, -1} {
			got, nblocks, _ := refine(raw, rounds, -1)
			want := mooreBlocks(raw, rounds)
			if !samePartition(got, want) {
				t.Errorf("%s, %d rounds: the partition differs from Moore's", re, rounds)
			}
			if m := slices.Max(got); int(m)+1 != nblocks {
				t.Errorf("%s: %d blocks reported, ids up to %d", re, nblocks, m)
			}
		}
		m := minimize(raw)
		if got, want := m.numStates(), slices.Max(mooreBlocks(raw, -1))+1; got != int(want) {
			t.Errorf("%s: minimized to %d states, Moore %d", re, got, want)
		}
		// stable: within stable-1 rounds every state of the minimal DFA is its own class
		// (what lets NewTokenGrammar skip withinEquivalence), and not within fewer
		identity := func(reps []uint32) bool {
			for q, r := range reps {
				if int(r) != q {
					return false
				}
			}
			return true
		}
		if m.stable == 0 {
			t.Errorf("%s: minimize did not record its rounds", re)
		} else {
			if !identity(withinEquivalence(m, m.stable-1, -1)) {
				t.Errorf("%s: states alike within %d rounds, recorded as stable", re, m.stable-1)
			}
			if m.stable > 1 && identity(withinEquivalence(m, m.stable-2, -1)) {
				t.Errorf("%s: stable within %d rounds, recorded as %d", re, m.stable-2, m.stable-1)
			}
		}
		if _, n, _ := refine(raw, -1, 0); n != 0 {
			t.Errorf("%s: a refinement over its work cap returned %d blocks", re, n)
		}
	}
}

// TestLongStringsLowering: strings of a long maxLength keep their language and are lowered
// so that masks stay cheap: a large counted repetition is one terminal shared by every key
// (not one automaton per key), and a group of alternatives counting a longer one out in
// blocks takes the closing quote into each alternative, so that no terminal ends after
// every character (each end walks the parser below a trie node).
func TestLongStringsLowering(t *testing.T) {
	char := `char ::= [^"\\] | "\\" ["\\/bfnrt]` + "\n"
	shared := mustGBNF(t, `root ::= "{" ("\"a\":" "\"" (char){0,256} "\"" | "\"b\":" "\"" (char){0,256} "\"" ("," "\"a\":" "\"" (char){0,256} "\"")?) "}"`+"\n"+char)
	big := 0
	for _, d := range shared.terms {
		if d.numStates() > 256 {
			big++
		}
	}
	if big != 1 {
		t.Errorf("%d terminals of over 256 states, want the string's one shared", big)
	}
	blocks := mustGBNF(t, `root ::= "[" "\"" (((char){100}){0,2} (char){0,99} | ((char){100}){3} (char){0,5}) "\"" "]"`+"\n"+char)
	for i, d := range blocks.terms {
		accepting := 0
		for q := range d.numStates() {
			if d.accept[q] {
				accepting++
			}
		}
		if accepting > 1 && d.numStates() > 50 {
			t.Errorf("terminal %d (%.60s) accepts in %d states", i, blocks.termName(i), accepting)
		}
	}
	for _, tc := range []struct {
		c    *Compiled
		pre  string
		post string
		n    int
		want bool
	}{
		{shared, `{"a":"`, `"}`, 0, true}, {shared, `{"a":"`, `"}`, 256, true}, {shared, `{"a":"`, `"}`, 257, false},
		{shared, `{"b":"x","a":"`, `"}`, 256, true}, {shared, `{"b":"x","a":"`, `"}`, 257, false},
		{blocks, `["`, `"]`, 0, true}, {blocks, `["`, `"]`, 99, true}, {blocks, `["`, `"]`, 100, true},
		{blocks, `["`, `"]`, 299, true}, {blocks, `["`, `"]`, 300, true}, {blocks, `["`, `"]`, 305, true},
		{blocks, `["`, `"]`, 306, false},
	} {
		s := tc.pre + strings.Repeat("x", tc.n) + tc.post
		if got := tc.c.Matches(s); got != tc.want {
			t.Errorf("%s x%d %s: Matches = %v, want %v", tc.pre, tc.n, tc.post, got, tc.want)
		}
	}
}

// equivalentDFA reports whether a and b accept the same strings, by a search over the pairs
// of states reachable together.
func equivalentDFA(a, b *dfa) bool {
	type pair struct{ p, q uint32 }
	seen := map[pair]bool{{a.start, b.start}: true}
	queue := []pair{{a.start, b.start}}
	for len(queue) > 0 {
		s := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if a.accept[s.p] != b.accept[s.q] {
			return false
		}
		for c := range 256 {
			n := pair{a.step(s.p, byte(c)), b.step(s.q, byte(c))}
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	return true
}
