package structured

// fragments holds, for one compile, the minimal automata of subexpressions that the subset
// construction embeds whole instead of building their Thompson NFAs (see nfa.embed).
//
// A Thompson NFA of a JSON string character is some 40 states, of which a DFA state inside
// the string holds a dozen: every DFA state of a string of maxLength 400 is a subset of
// ten or more NFA states, and the construction reaches twice the minimal number of them
// (the NFA keeps apart paths the minimal automaton merges). Embedding the character's
// minimal automaton (about 14 states) instead makes most subsets one or two states and the
// raw automaton about minimal, and a subexpression shared by many terminals (a rule's body
// such as the JSON string, inlined by pointer) is determinized once per compile instead of
// once per terminal. The language never changes: an embedded automaton matches exactly
// what its expression matches.
type fragments struct {
	maxNFA, maxDFA int
	check          func() error
	memo           map[*node]*dfa // nil: built as a Thompson NFA
	size           map[*node]int
	shared         map[*node]bool // the bodies of inlined rules
	spare          *direct        // the tables of the last direct build, for the next one
	seenSets       map[byteSet]bool
	seenNodes      map[*node]bool // direct.classes' maps, cleared, for the next build
}

func newFragments(maxNFA, maxDFA int, check func() error) *fragments {
	return &fragments{maxNFA: maxNFA, maxDFA: maxDFA, check: check,
		memo: map[*node]*dfa{}, size: map[*node]int{}, shared: map[*node]bool{}}
}

// eligible reports whether n is embedded: a rule's body (shared by every terminal that
// inlines the rule) or the body of a repetition (copied once per count), of at least
// fragMinNodes expression nodes, other than a bounded repetition of more than fragMaxCount
// (embedded, its automaton would be determinized twice, alone and in its terminal; its
// copies embed their body instead). Other alternatives are not embedded: each would be
// determinized once more at every level of nesting (a trie of key names).
func (f *fragments) eligible(n *node, body bool) bool {
	if !body && !f.shared[n] {
		return false
	}
	switch n.op {
	case opAlt, opConcat:
	case opRepeat:
		if n.max > fragMaxCount {
			return false
		}
	default:
		return false
	}
	return f.nodes(n) >= fragMinNodes
}

const (
	fragMinNodes = 6
	fragMaxCount = 16
)

// get returns n's minimal automaton (nil when it is built in place after all: over a
// state limit alone, where the limits judge it in its terminal), or the error of a
// compile over its time limit.
func (f *fragments) get(n *node) (*dfa, error) {
	if d, ok := f.memo[n]; ok {
		return d, nil
	}
	d, err := compileDFAWith(n, f, f.maxNFA, f.maxDFA, f.check)
	if err != nil {
		if err := f.check(); err != nil {
			return nil, err
		}
		d = nil
	}
	f.memo[n] = d
	return d, nil
}

// nodes returns the number of nodes of n's expression tree (repetitions not expanded),
// capped.
func (f *fragments) nodes(n *node) int {
	if s, ok := f.size[n]; ok {
		return s
	}
	s := 1
	for _, c := range n.subs {
		s = min(s+f.nodes(c), 1<<20)
	}
	f.size[n] = s
	return s
}
