package structured

import (
	"slices"
	"testing"
)

// referenceLexeme is walkLexeme by definition: every trie node stepped through the DFA, the
// tokens of every node the DFA survives and the nodes with children where it accepts.
func referenceLexeme(t *TokenTrie, d *dfa, q uint32) (ids []int32, ends []int32) {
	state := make([]uint32, len(t.label))
	state[0] = q
	path := []int{0}
	for i := 1; i < len(t.label); i++ {
		for int(t.depth[path[len(path)-1]]) >= int(t.depth[i]) {
			path = path[:len(path)-1]
		}
		parent := path[len(path)-1]
		path = append(path, i)
		if state[parent] == 0 {
			continue
		}
		s := d.step(state[parent], t.label[i])
		state[i] = s
		if s == 0 {
			continue
		}
		ids = append(ids, t.tokensAt(i)...)
		if d.accept[s] && t.end[i] > int32(i+1) {
			ends = append(ends, int32(i))
		}
	}
	slices.Sort(ids)
	return ids, ends
}

// entryIDs returns the tokens of a lexeme entry, sorted.
func entryIDs(e *lexEntry, n int) []int32 {
	if e.dense != nil {
		return allowedIDs(e.dense, n)
	}
	ids := slices.Clone(e.ids)
	slices.Sort(ids)
	return ids
}

// TestWalkLexemeAgainstReference: the walk that takes whole subtrees where the DFA loops,
// or where they stay inside a reference language the state survives, gives the tokens and
// end nodes of a node-by-node walk, for every state of terminals inside and outside JSON
// strings, unbounded and counted (on Llama 3's vocabulary, 12 states spread over each
// terminal), on a small vocabulary and on Llama 3's.
func TestWalkLexemeAgainstReference(t *testing.T) {
	grammars := []string{
		`root ::= "\"" ([^"\\] | "\\" ["\\/bfnrt]){0,200} "\""`,
		`root ::= "{\"a\": \"" [^"]* "\", \"b\": " [0-9]{1,5} "}"`,
		`root ::= ([a-z ]* "." )+`,
		`root ::= "x" [^\n]* "\n" [ ]{0,3}`,
		// strings of JSON characters, unbounded and counted, in ASCII and beyond
		`root ::= "{\"k\": \"" ([ !#-\[\]-~] | [\u0080-\U0010FFFF] | "\\" ["\\/bfnrt])* "\"}"`,
		`root ::= "\"" ([ !#-\[\]-~] | [\u0080-\U0010FFFF]){0,40} "\","`,
		`root ::= "\"" [ !#-\[\]-~]{2,30} "\":" [a-zA-Z0-9]{1,20} "@"`,
	}
	vocabs := map[string]Vocabulary{"small": smallVocab(), "llama3": loadLlama3(t)}
	for vname, v := range vocabs {
		trie, err := NewTokenTrie(v)
		if err != nil {
			t.Fatal(err)
		}
		skipped, covered, died, exited := 0, 0, 0, 0
		for _, src := range grammars {
			c := mustGBNF(t, src)
			tg := NewTokenGrammar(c, trie, v)
			for term, d := range c.terms {
				step := uint32(1)
				if vname == "llama3" { // the reference walk of a 128k vocabulary is slow: 12 states
					step = max(1, uint32(d.numStates())/12)
				}
				for q := uint32(1); q < uint32(d.numStates()); q += step {
					e := tg.walkLexeme(int32(term), q, nil)
					ids, ends := referenceLexeme(trie, d, q)
					if got := entryIDs(e, trie.numTokens); !slices.Equal(got, ids) {
						t.Fatalf("%s %s term %d state %d: %d tokens, reference %d", vname, src, term, q, len(got), len(ids))
					}
					if !slices.Equal(e.ends, ends) {
						t.Fatalf("%s %s term %d state %d: ends %v, reference %v", vname, src, term, q, head(e.ends), head(ends))
					}
					for r, ref := range referenceDFAs() {
						h, dies, exits := simulationDepth(d, q, ref, tg.refReps[term][r], trie.maxDepth)
						if dies && h > 0 {
							died++
						}
						rn := &trie.refs[r]
						for i := 1; i < len(trie.label) && h > 0; i++ {
							dep, id := int(rn.node[i]>>16), int(rn.node[i]&0xffff)
							if dep == 0 || dep > h && !dies || id >= len(rn.exitSets) || trie.end[i] == int32(i+1) {
								continue
							}
							if x := rn.exitSets[id]; x[0]&exits[0]|x[1]&exits[1]|x[2]&exits[2]|x[3]&exits[3] == 0 {
								covered++ // a subtree the walk from q takes whole by reference r
								if !x.empty() {
									exited++ // one with nodes outside the reference, dead from q
								}
								break
							}
						}
					}
					for i := 1; i < min(len(trie.label), 5000); i++ {
						if trie.end[i] > int32(i+1) && tg.loops[term][q].contains(&trie.belowSets[trie.below[i]]) {
							skipped++ // a subtree the walk from q may take whole
						}
					}
				}
			}
		}
		if skipped == 0 {
			t.Errorf("%s: no subtree stays in a looping state: the fast path is not tested", vname)
		}
		if covered == 0 || died == 0 || exited == 0 {
			t.Errorf("%s: %d states take subtrees by a reference language, %d where longer inputs die, %d with dead exits: a fast path is not tested", vname, covered, died, exited)
		}
	}
}

// TestSimulationDepth: the depth to which a state survives every string of a reference
// language, against the counts written in the grammars.
func TestSimulationDepth(t *testing.T) {
	const limit = 200
	cases := []struct {
		src        string
		ref        int // 0 JSON characters, 1 the same in ASCII, 2 letters and digits
		want       int // from the state after the opening quote
		dies       bool
		afterQuote bool
	}{
		{`root ::= "\"" [^"\\]* "\""`, 0, limit, false, true},
		// 40 characters: a 41st ASCII one dies, but 39 and a 2-byte one do not
		{`root ::= "\"" [^"\\]{0,40} "\""`, 0, 40, false, true},
		{`root ::= "\"" [^"\\]{0,40} "\""`, 1, 40, true, true},
		{`root ::= "\"" [ -~]{3,9} "\""`, 0, 0, false, true},    // no code point above ASCII
		{`root ::= "\"" [ -~]{3,9} "\""`, 1, 9, true, true},     // ASCII: every string of 9 bytes
		{`root ::= "\"" [a-z0-9]{1,12} "@"`, 1, 0, false, true}, // dies on a space, not on "a"
		{`root ::= "\"" [a-zA-Z0-9]{1,12} "@"`, 2, 12, true, true},
		{`root ::= "\"" [a-zA-Z0-9]{1,12} "1"`, 2, 1, false, true}, // "a1" is complete
		{`root ::= [a-zA-Z0-9]*`, 2, 0, false, false},              // accepting: lexeme ends are not skipped
	}
	for _, tc := range cases {
		c := mustGBNF(t, tc.src)
		d := c.terms[0]
		q := d.start
		if tc.afterQuote {
			q = d.step(q, '"')
		}
		ref := referenceDFAs()[tc.ref]
		if got, dies, _ := simulationDepth(d, q, ref, classReps(d, ref), limit); got != tc.want || dies != tc.dies {
			t.Errorf("%s, reference %d: depth %d (dies %v), want %d (%v)", tc.src, tc.ref, got, dies, tc.want, tc.dies)
		}
	}
}
