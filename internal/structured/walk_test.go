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

// TestWalkLexemeAgainstReference: the walk that takes whole subtrees where the DFA loops
// gives the tokens and end nodes of a node-by-node walk, for every state of terminals
// inside and outside JSON strings (where the loops are), on a small vocabulary and on
// Llama 3's.
func TestWalkLexemeAgainstReference(t *testing.T) {
	grammars := []string{
		`root ::= "\"" ([^"\\] | "\\" ["\\/bfnrt]){0,200} "\""`,
		`root ::= "{\"a\": \"" [^"]* "\", \"b\": " [0-9]{1,5} "}"`,
		`root ::= ([a-z ]* "." )+`,
		`root ::= "x" [^\n]* "\n" [ ]{0,3}`,
	}
	vocabs := map[string]Vocabulary{"small": smallVocab(), "llama3": loadLlama3(t)}
	for vname, v := range vocabs {
		trie, err := NewTokenTrie(v)
		if err != nil {
			t.Fatal(err)
		}
		skipped := 0
		for _, src := range grammars {
			c := mustGBNF(t, src)
			tg := NewTokenGrammar(c, trie, v)
			for term, d := range c.terms {
				for q := uint32(1); q < uint32(d.numStates()); q++ {
					if vname == "llama3" && q > 12 {
						break // the reference walk of a 128k vocabulary is slow
					}
					e := tg.walkLexeme(int32(term), q, nil)
					ids, ends := referenceLexeme(trie, d, q)
					if got := entryIDs(e, trie.numTokens); !slices.Equal(got, ids) {
						t.Fatalf("%s %s term %d state %d: %d tokens, reference %d", vname, src, term, q, len(got), len(ids))
					}
					if !slices.Equal(e.ends, ends) {
						t.Fatalf("%s %s term %d state %d: ends %v, reference %v", vname, src, term, q, head(e.ends), head(ends))
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
	}
}
