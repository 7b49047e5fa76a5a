package structured

import (
	"fmt"
	"slices"
	"time"
)

// Limits caps the work and memory of a compile. A grammar over any cap fails to compile with
// an error naming the cap, instead of stalling or exhausting the server.
type Limits struct {
	// Time bounds the wall time of one compile.
	Time time.Duration
	// Rules bounds the rules after lowering (helper rules of groups and repetitions
	// included).
	Rules int
	// NFAStates and DFAStates bound the automaton of each terminal; TotalDFAStates bounds
	// the sum over all terminals.
	NFAStates, DFAStates, TotalDFAStates int
	// LexemeSize bounds the size (in byte leaves, repetitions expanded) of a non-recursive
	// rule that is turned into one terminal; larger rules stay rules of the parser.
	LexemeSize int
}

// DefaultLimits returns the limits used when none are given.
func DefaultLimits() Limits {
	return Limits{
		Time:           2 * time.Second,
		Rules:          20000,
		NFAStates:      200000,
		DFAStates:      20000,
		TotalDFAStates: 200000,
		LexemeSize:     2000,
	}
}

// sym is a grammar symbol of a lowered rule: a nonterminal (>= 0, a rule index) or a
// terminal (< 0: terminal -1-sym).
type sym int32

func termSym(t int) sym     { return sym(-1 - t) }
func (s sym) isTerm() bool  { return s < 0 }
func (s sym) terminal() int { return int(-1 - s) }

// Compiled is a grammar lowered for the Earley parser: rules whose alternatives are
// sequences of symbols, and terminals as DFAs. It is immutable and safe for concurrent use;
// Matchers and token Maskers hold the per-sequence state.
type Compiled struct {
	terms []*dfa
	// termExpr is each terminal's expression, its rule references inlined and interned
	// (see lowering.intern): its identity, printed in messages.
	termExpr []*node
	rules    [][][]sym // rule -> alternatives -> symbols
	ruleName []string
	nullable []bool
	start    int // the augmented start rule: a single alternative [original start]

	// dotted positions: every (rule, alternative, dot) is one position id; the positions
	// of one alternative are consecutive, the last being the completed item.
	posNext  []sym   // the symbol after the dot (valid when !posEnd)
	posEnd   []bool  // the dot is at the end
	posRule  []int32 // the rule of the position
	ruleAlts [][]int32
}

// Compile lowers g within the limits: non-recursive rules small enough become single
// terminals (lexemes), the rest become parser rules whose adjacent literal parts are fused
// into terminals.
func Compile(g *Grammar, lim Limits) (*Compiled, error) {
	return compile(g, lim, true)
}

// compile is Compile, embedding the automata of shared subexpressions when frags is set
// (tests compare against the plain construction).
func compile(g *Grammar, lim Limits, frags bool) (*Compiled, error) {
	if g == nil || len(g.rules) == 0 {
		return nil, fmt.Errorf("compile: empty grammar")
	}
	deadline := time.Now().Add(lim.Time)
	lw := &lowering{g: g, lim: lim, deadline: deadline,
		lexical: make([]int8, len(g.rules)), size: make([]int, len(g.rules)),
		inlined: make([]*node, len(g.rules)), ruleSym: make([]int, len(g.rules)),
		termIndex: map[*node]int{}, sizes: map[*node]sizeResult{},
		inlinedExpr: map[*node]*node{}, interned: map[uint64][]*node{}, nodeID: map[*node]uint64{}}
	for i := range lw.ruleSym {
		lw.ruleSym[i] = -1
	}
	if frags {
		lw.frags = newFragments(lim.NFAStates, lim.DFAStates, lw.check)
	}
	c, err := lw.run()
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	return c, nil
}

type lowering struct {
	g        *Grammar
	lim      Limits
	deadline time.Time
	c        Compiled

	lexical   []int8 // per source rule: 0 unknown, 1 lexical, -1 not, 2 visiting
	size      []int
	inlined   []*node
	sizes     map[*node]sizeResult // exprSize's results
	ruleSym   []int                // source rule -> lowered rule index (-1: not yet)
	termIndex map[*node]int        // an interned expression -> its terminal
	// inlinedExpr memoizes inline by source node; interned holds the inlined nodes by the
	// hash of their fields and children (see intern), nodeID numbers them.
	inlinedExpr map[*node]*node
	interned    map[uint64][]*node
	nodeID      map[*node]uint64
	dfaStates   int
	frags       *fragments // subexpression automata shared by the terminals (nil: none)
}

func (lw *lowering) check() error {
	if time.Now().After(lw.deadline) {
		return fmt.Errorf("compile took longer than the limit of %v", lw.lim.Time)
	}
	return nil
}

func (lw *lowering) run() (*Compiled, error) {
	c := &lw.c
	c.start = lw.newRule("(start)")
	root, err := lw.ruleRef(lw.g.start)
	if err != nil {
		return nil, err
	}
	c.rules[c.start] = [][]sym{root}
	if err := lw.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

func (lw *lowering) newRule(name string) int {
	lw.c.rules = append(lw.c.rules, nil)
	lw.c.ruleName = append(lw.c.ruleName, name)
	return len(lw.c.rules) - 1
}

// isLexical reports whether source rule r is non-recursive and small enough to be one
// terminal, computing its size.
func (lw *lowering) isLexical(r int) bool {
	switch lw.lexical[r] {
	case 1:
		return true
	case -1, 2: // 2: r is on the current path, so it is recursive
		return false
	}
	lw.lexical[r] = 2
	size, ok := lw.exprSize(lw.g.rules[r].body)
	if ok && size <= lw.lim.LexemeSize {
		lw.lexical[r] = 1
		lw.size[r] = size
		return true
	}
	lw.lexical[r] = -1
	return false
}

// exprSize returns n's size in byte leaves with repetitions expanded, and whether every
// rule n refers to is lexical. Sizes are remembered per node (lowering asks for them at
// every level of nested groups).
func (lw *lowering) exprSize(n *node) (int, bool) {
	if r, ok := lw.sizes[n]; ok {
		return r.size, r.ok
	}
	size, ok := lw.computeSize(n)
	if n.op != opRef || lw.lexical[n.ref] != 2 { // a reference on the current path is not final
		lw.sizes[n] = sizeResult{size, ok}
	}
	return size, ok
}

type sizeResult struct {
	size int
	ok   bool
}

func (lw *lowering) computeSize(n *node) (int, bool) {
	switch n.op {
	case opEmpty:
		return 0, true
	case opBytes:
		return 1, true
	case opRef:
		if !lw.isLexical(n.ref) {
			return 0, false
		}
		return lw.size[n.ref], true
	case opRepeat:
		if lw.standalone(n.subs[0]) {
			return lw.lim.LexemeSize + 1, true
		}
		s, ok := lw.exprSize(n.subs[0])
		k := n.max
		if k < 0 {
			k = n.min + 1
		}
		if n.max >= 0 && s <= countedBodySize {
			// A counted repetition of a small body (a JSON string's character under
			// maxLength) makes an automaton of about k copies of the body's few states, not
			// of its leaves: counted so, char{1,64} stays one terminal instead of a chain of
			// 64 parser rules, each of whose ends costs a parser walk below every trie node
			// inside the string (seconds a mask on Llama 3's vocabulary).
			return min(s*k, s+countedCopySize*k), ok
		}
		return min(s*max(k, 1), 1<<30), ok
	}
	total, all := 0, true
	for _, s := range n.subs {
		if lw.standalone(s) {
			// not fused with its neighbours: see standalone
			return lw.lim.LexemeSize + 1, true
		}
		size, ok := lw.exprSize(s)
		total += size
		all = all && ok
		if total > 1<<30 {
			total = 1 << 30
		}
	}
	return total, all
}

// countedBodySize is the largest body (in byte leaves) whose counted repetition is sized by
// its count rather than expanded (see exprSize), and countedCopySize what each copy counts
// then: under the default LexemeSize, counts up to about 480 (a JSON string of maxLength 255
// or 256 is one terminal), whose automata (count times the body's states, minimized by the
// incremental refinement in time about linear in the states) compile in milliseconds.
const (
	countedBodySize = 256
	countedCopySize = 4
)

// standaloneSize is the counted size (see exprSize) above which a counted repetition is a
// terminal of its own instead of being fused with its neighbours.
const standaloneSize = 512

// standalone reports whether n is a large counted repetition (a JSON string of maxLength
// above about 120) that fits as a terminal. Such a repetition is lowered as its own
// terminal, fused only with a small part after it (the closing quote, so that the lexeme
// does not end after every character), and whatever contains it stays a parser rule: the
// terminal is then one automaton shared by every property and alternative that repeats the
// same body as many times, where fusing it with each key made one automaton of thousands of
// states per key (seconds of compile for a schema of a few such strings).
func (lw *lowering) standalone(n *node) bool {
	if n.op != opRepeat || n.max < 0 {
		return false
	}
	s, ok := lw.exprSize(n.subs[0])
	if !ok || s > countedBodySize {
		return false
	}
	k := max(n.max, 1)
	size := min(s*k, s+countedCopySize*k)
	return size > standaloneSize && size <= lw.lim.LexemeSize
}

// standaloneSuffix is the largest part after a standalone repetition fused into its
// terminal, and after a group distributed over its alternatives.
const standaloneSuffix = 16

// smallSuffix reports whether n is a small lexical part (not a rule reference) that may be
// fused into the terminal before it.
func (lw *lowering) smallSuffix(n *node) bool {
	if n.op == opRef || lw.standalone(n) {
		return false
	}
	size, ok := lw.exprSize(n)
	return ok && size <= standaloneSuffix
}

// distribute returns (a | b ...) followed by suffix as (a suffix | b suffix ...).
func distribute(alt, suffix *node) *node {
	subs := make([]*node, len(alt.subs))
	for i, a := range alt.subs {
		if a.op == opConcat {
			subs[i] = concatNode(append(append([]*node(nil), a.subs...), suffix)...)
		} else {
			subs[i] = concatNode(a, suffix)
		}
	}
	return altNode(subs...)
}

// exprLexical reports whether n refers only to lexical rules (and fits as a terminal).
func (lw *lowering) exprLexical(n *node) bool {
	size, ok := lw.exprSize(n)
	return ok && size <= lw.lim.LexemeSize
}

// inline returns n with every (lexical) rule reference replaced by the rule's body, interned
// (see intern): equal expressions come back as one node.
func (lw *lowering) inline(n *node) *node {
	if lw.inlinedExpr == nil {
		lw.inlinedExpr, lw.interned, lw.nodeID = map[*node]*node{}, map[uint64][]*node{}, map[*node]uint64{}
	}
	if out, ok := lw.inlinedExpr[n]; ok {
		return out
	}
	var out *node
	switch n.op {
	case opEmpty, opBytes:
		out = lw.intern(n)
	case opRef:
		if lw.inlined[n.ref] == nil {
			lw.inlined[n.ref] = lw.inline(lw.g.rules[n.ref].body)
			if lw.frags != nil {
				lw.frags.shared[lw.inlined[n.ref]] = true
			}
		}
		out = lw.inlined[n.ref]
	default:
		e := &node{op: n.op, min: n.min, max: n.max, subs: make([]*node, len(n.subs))}
		for i, s := range n.subs {
			e.subs[i] = lw.inline(s)
		}
		out = lw.intern(e)
	}
	lw.inlinedExpr[n] = out
	return out
}

// intern returns the node equal to n (same operator, fields and children, the children
// being interned already) seen before in this compile, else n, recorded. Equal
// expressions are then one pointer: a terminal's identity is its interned expression
// (printing every terminal's expression as its key cost about a tenth of the compile of
// schemas of hundreds of terminals), and the automaton of a subexpression that
// several terminals embed (see fragments) is built once.
func (lw *lowering) intern(n *node) *node {
	h := uint64(fnvOffset)
	mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
	mix(uint64(n.op))
	mix(uint64(int64(n.min)))
	mix(uint64(int64(n.max)))
	mix(uint64(int64(n.ref)))
	for _, w := range n.set {
		mix(w)
	}
	for _, s := range n.subs {
		mix(lw.nodeID[s])
	}
	for _, m := range lw.interned[h] {
		if m.op == n.op && m.min == n.min && m.max == n.max && m.ref == n.ref && m.set == n.set &&
			slices.Equal(m.subs, n.subs) {
			return m
		}
	}
	lw.interned[h] = append(lw.interned[h], n)
	lw.nodeID[n] = uint64(len(lw.nodeID) + 1)
	return n
}

// terminal returns the symbol of the terminal matching lexical expression n, sharing one
// terminal between equal expressions.
func (lw *lowering) terminal(n *node) (sym, error) {
	e := lw.inline(n)
	if t, ok := lw.termIndex[e]; ok {
		return termSym(t), nil
	}
	if err := lw.check(); err != nil {
		return 0, err
	}
	d, err := compileDFAWith(e, lw.frags, lw.lim.NFAStates, lw.lim.DFAStates, lw.check)
	if err != nil {
		return 0, fmt.Errorf("terminal %.80s: %w", e, err)
	}
	lw.dfaStates += d.numStates()
	if lw.dfaStates > lw.lim.TotalDFAStates {
		return 0, fmt.Errorf("terminals over %d automaton states in all", lw.lim.TotalDFAStates)
	}
	t := len(lw.c.terms)
	lw.c.terms = append(lw.c.terms, d)
	lw.c.termExpr = append(lw.c.termExpr, e)
	lw.termIndex[e] = t
	return termSym(t), nil
}

// ruleRef returns the symbols standing for source rule r: its terminal when it is lexical,
// else its lowered rule.
func (lw *lowering) ruleRef(r int) ([]sym, error) {
	if lw.isLexical(r) {
		t, err := lw.terminal(&node{op: opRef, ref: r})
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", lw.ruleWhere(r), err)
		}
		return []sym{t}, nil
	}
	if lw.ruleSym[r] >= 0 {
		return []sym{sym(lw.ruleSym[r])}, nil
	}
	idx := lw.newRule(lw.g.rules[r].name)
	lw.ruleSym[r] = idx
	body := lw.g.rules[r].body
	alts := []*node{body}
	if body.op == opAlt {
		alts = body.subs
	}
	lowered := make([][]sym, 0, len(alts))
	for _, a := range alts {
		seq, err := lw.lowerSeq(a)
		if err != nil {
			return nil, err
		}
		lowered = append(lowered, seq)
	}
	lw.c.rules[idx] = lowered
	return []sym{sym(idx)}, nil
}

func (lw *lowering) ruleWhere(r int) string {
	if p := lw.g.rules[r].pos; p != "" {
		return fmt.Sprintf("%q (%s)", lw.g.rules[r].name, p)
	}
	return fmt.Sprintf("%q", lw.g.rules[r].name)
}

// lowerSeq lowers n to a sequence of symbols, fusing adjacent lexical parts (other than
// bare rule references, which keep their own shared terminal) into one terminal.
func (lw *lowering) lowerSeq(n *node) ([]sym, error) {
	if n.op != opConcat {
		return lw.lowerExpr(n)
	}
	var out []sym
	var run []*node
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		t, err := lw.terminal(concatNode(run...))
		run = nil
		if err != nil {
			return err
		}
		out = append(out, t)
		return nil
	}
	for i := 0; i < len(n.subs); i++ {
		s := n.subs[i]
		if s.op == opAlt && i+1 < len(n.subs) && lw.smallSuffix(n.subs[i+1]) && !lw.exprLexical(s) {
			// (a | b) c as (a c | b c): each alternative's last terminal takes the small
			// part after the group (a JSON string's closing quote after the alternatives
			// that count out a long maxLength in blocks), so that it does not end after
			// every character
			s = distribute(s, n.subs[i+1])
			i++
		}
		if lw.standalone(s) {
			if err := flush(); err != nil {
				return nil, err
			}
			if i+1 < len(n.subs) && lw.smallSuffix(n.subs[i+1]) {
				s = concatNode(s, n.subs[i+1])
				i++
			}
			t, err := lw.terminal(s)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
			continue
		}
		if s.op != opRef && lw.exprLexical(s) {
			run = append(run, s)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		syms, err := lw.lowerExpr(s)
		if err != nil {
			return nil, err
		}
		out = append(out, syms...)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// lowerExpr lowers one expression, adding helper rules for groups and repetitions that
// involve parser rules.
func (lw *lowering) lowerExpr(n *node) ([]sym, error) {
	if n.op == opEmpty {
		return nil, nil
	}
	if n.op == opRef {
		return lw.ruleRef(n.ref)
	}
	if lw.exprLexical(n) {
		t, err := lw.terminal(n)
		if err != nil {
			return nil, err
		}
		return []sym{t}, nil
	}
	if err := lw.check(); err != nil {
		return nil, err
	}
	switch n.op {
	case opConcat:
		return lw.lowerSeq(n)
	case opAlt:
		idx := lw.newRule("(group)")
		var alts [][]sym
		for _, a := range n.subs {
			seq, err := lw.lowerSeq(a)
			if err != nil {
				return nil, err
			}
			alts = append(alts, seq)
		}
		lw.c.rules[idx] = alts
		return []sym{sym(idx)}, lw.checkRules()
	case opRepeat:
		sub, err := lw.lowerSeq(n.subs[0])
		if err != nil {
			return nil, err
		}
		var out []sym
		for range n.min {
			out = append(out, sub...)
		}
		if n.max < 0 { // star ::= star sub | (empty): left recursion suits Earley
			idx := lw.newRule("(repeat)")
			lw.c.rules[idx] = [][]sym{append([]sym{sym(idx)}, sub...), nil}
			return append(out, sym(idx)), lw.checkRules()
		}
		// opt_k ::= sub opt_{k-1} | (empty)
		prev := -1
		for range n.max - n.min {
			idx := lw.newRule("(optional)")
			alt := append([]sym(nil), sub...)
			if prev >= 0 {
				alt = append(alt, sym(prev))
			}
			lw.c.rules[idx] = [][]sym{alt, nil}
			prev = idx
			if err := lw.checkRules(); err != nil {
				return nil, err
			}
		}
		if prev >= 0 {
			out = append(out, sym(prev))
		}
		return out, nil
	}
	return nil, fmt.Errorf("internal error: unexpected expression %v", n)
}

func (lw *lowering) checkRules() error {
	if len(lw.c.rules) > lw.lim.Rules {
		return fmt.Errorf("grammar over %d rules after expanding groups and repetitions", lw.lim.Rules)
	}
	return nil
}

// finish drops unproductive alternatives, computes nullable rules and lays out the dotted
// positions.
func (lw *lowering) finish() error {
	c := &lw.c
	termOK := func(t int) bool { return c.terms[t].start != 0 }
	productive := make([]bool, len(c.rules))
	c.nullable = make([]bool, len(c.rules))
	for changed := true; changed; {
		changed = false
		for r, alts := range c.rules {
			for _, alt := range alts {
				prod, null := true, true
				for _, s := range alt {
					if s.isTerm() {
						prod = prod && termOK(s.terminal())
						null = null && c.terms[s.terminal()].accept[c.terms[s.terminal()].start]
					} else {
						prod = prod && productive[s]
						null = null && c.nullable[s]
					}
				}
				if prod && !productive[r] {
					productive[r] = true
					changed = true
				}
				if null && !c.nullable[r] {
					c.nullable[r] = true
					changed = true
				}
			}
		}
	}
	if !productive[c.start] {
		return fmt.Errorf("the grammar matches no string")
	}
	for r, alts := range c.rules {
		kept := alts[:0]
		for _, alt := range alts {
			ok := true
			for _, s := range alt {
				if s.isTerm() && !termOK(s.terminal()) || !s.isTerm() && !productive[s] {
					ok = false
				}
			}
			if ok {
				kept = append(kept, alt)
			}
		}
		c.rules[r] = kept
	}
	c.ruleAlts = make([][]int32, len(c.rules))
	for r, alts := range c.rules {
		for _, alt := range alts {
			c.ruleAlts[r] = append(c.ruleAlts[r], int32(len(c.posNext)))
			for _, s := range alt {
				c.posNext = append(c.posNext, s)
				c.posEnd = append(c.posEnd, false)
				c.posRule = append(c.posRule, int32(r))
			}
			c.posNext = append(c.posNext, 0)
			c.posEnd = append(c.posEnd, true)
			c.posRule = append(c.posRule, int32(r))
		}
	}
	return nil
}

// NumTerminals returns the number of terminals (lexemes) of the compiled grammar.
func (c *Compiled) NumTerminals() int { return len(c.terms) }

// NumRules returns the number of parser rules of the compiled grammar.
func (c *Compiled) NumRules() int { return len(c.rules) }

// termName returns terminal t's expression, printed.
func (c *Compiled) termName(t int) string { return c.termExpr[t].String() }
