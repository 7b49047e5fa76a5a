package structured

import (
	"math/bits"
	"slices"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// TokenGrammar is a compiled grammar bound to one tokenizer's trie: the shared, read-mostly
// part of every Masker of that grammar, holding the lexeme cache described below. It is safe
// for concurrent use.
//
// Masks are computed in two parts. Most of a mask depends only on the lexeme being matched
// and the state of its DFA: for a terminal T in DFA state q, the tokens whose bytes keep T's
// DFA alive are allowed whatever the parser's state (a live DFA state can always finish
// the lexeme, and the parser item waiting for T can always finish its rule). That set, and
// the trie nodes where T may end inside a token, are computed once per (T, q) by a walk of
// the trie over the DFA alone and cached here. Only below those nodes, where the token goes
// on past the end of the lexeme, does the walk consult the parser.
type TokenGrammar struct {
	c     *Compiled
	trie  *TokenTrie
	vocab Vocabulary

	mu      sync.Mutex
	lexemes map[lexKey]*lexEntry
	// reps maps each terminal's DFA states to a representative whose lexeme entry is the
	// same (see withinEquivalence); nil for a terminal where no two states share one.
	reps [][]uint32
	// loops holds, per terminal and DFA state, the bytes on which the state moves to itself.
	loops [][]byteSet
	// refReps holds, per terminal and reference language, a byte of each class of the
	// bytes partitioned by both automata (see simulationDepth).
	refReps [][][]byte
}

type lexKey struct {
	term int32
	q    uint32
}

// lexEntry is what a lexeme in one DFA state allows by itself.
type lexEntry struct {
	dense sample.Mask // the tokens that stay inside the lexeme (nil: see ids)
	ids   []int32     // the same when few
	ends  []int32     // trie nodes with children where the lexeme may end
}

// maxRefineWork bounds the work of withinEquivalence for one terminal (signature entries,
// see refine: about 100 ms); a larger automaton keeps one cache entry per state.
const maxRefineWork = 1 << 25

// NewTokenGrammar binds c to a tokenizer (trie must be built from vocab).
func NewTokenGrammar(c *Compiled, trie *TokenTrie, vocab Vocabulary) *TokenGrammar {
	g := &TokenGrammar{c: c, trie: trie, vocab: vocab, lexemes: map[lexKey]*lexEntry{},
		reps: make([][]uint32, len(c.terms)), loops: make([][]byteSet, len(c.terms)),
		refReps: make([][][]byte, len(c.terms))}
	refs := referenceDFAs()
	for i, d := range c.terms {
		g.loops[i] = selfLoops(d)
		for _, ref := range refs {
			g.refReps[i] = append(g.refReps[i], classReps(d, ref))
		}
		// A DFA of fewer states than the longest token has no two states alike within
		// it unless minimization would have merged them; nor has a minimal DFA whose
		// refinement was stable within as many rounds (inputs that long tell apart all
		// states that any input does): up to 10-30 ms of refinement a schema (bxci,
		// o21306, github-funding) found each state its own class here.
		if d.numStates() > trie.maxDepth && (d.stable == 0 || d.stable-1 > trie.maxDepth) {
			g.reps[i] = withinEquivalence(d, trie.maxDepth, maxRefineWork)
		}
	}
	return g
}

// Compiled returns the grammar.
func (g *TokenGrammar) Compiled() *Compiled { return g.c }

// lexeme returns the cached entry of terminal term in DFA state q, computing it on first use.
func (g *TokenGrammar) lexeme(term int32, q uint32, stack []uint32) *lexEntry {
	if r := g.reps[term]; r != nil {
		q = r[q]
	}
	key := lexKey{term, q}
	g.mu.Lock()
	e, ok := g.lexemes[key]
	g.mu.Unlock()
	if ok {
		return e
	}
	e = g.walkLexeme(term, q, stack)
	g.mu.Lock()
	g.lexemes[key] = e
	g.mu.Unlock()
	return e
}

// selfLoops returns, per state of d, the bytes on which it moves to itself.
func selfLoops(d *dfa) []byteSet {
	var classBytes [256]byteSet
	for b := range 256 {
		classBytes[d.class[b]].add(byte(b))
	}
	loops := make([]byteSet, d.numStates())
	for q := 1; q < d.numStates(); q++ {
		for c, to := range d.next[q*d.nclass : (q+1)*d.nclass] {
			if int(to) == q {
				for w := range loops[q] {
					loops[q][w] |= classBytes[c][w]
				}
			}
		}
	}
	return loops
}

// sparseLimit is the most tokens a lexeme entry keeps as a list rather than a bitmask.
const sparseLimit = 512

// walkLexeme walks the whole trie over terminal term's DFA alone from state q. Two kinds
// of subtree are taken whole, their tokens added without stepping through their nodes:
// where the walk reaches a state that loops on every byte below the node (inside a JSON
// string, many subtrees of the vocabulary), the subtree stays in that state; and where the
// subtree's nodes are either inside a reference language that q's DFA survives without
// accepting, or dead (see reference.go).
func (g *TokenGrammar) walkLexeme(term int32, q uint32, stack []uint32) *lexEntry {
	t, d, loops := g.trie, g.c.terms[term], g.loops[term]
	refs := referenceDFAs()
	// per reference used: its nodes, the simulation depth from q (all depths when every
	// longer input dies), and the exit sets q's DFA dies on, as bits (see reference.go)
	var nodes [8][]uint32
	var depths [8]uint32
	var exitOK [8]uint64
	used := 0
	e := &lexEntry{}
	for r, ref := range refs {
		h, dies, exits := simulationDepth(d, q, ref, g.refReps[term][r], t.maxDepth)
		if h == 0 {
			continue
		}
		rn := &t.refs[r]
		nodes[used], depths[used] = rn.node, uint32(h)
		if dies {
			depths[used] = 1<<16 - 1
		}
		for k := range rn.exitSets {
			x := &rn.exitSets[k]
			if x[0]&exits[0]|x[1]&exits[1]|x[2]&exits[2]|x[3]&exits[3] == 0 {
				exitOK[used] |= 1 << k
			}
		}
		used++
		// the tokens inside the reference at most h deep are allowed, so the subtrees
		// taken whole need no more
		m := rn.masks[min(h, t.maxDepth)]
		if e.dense == nil {
			e.dense = slices.Clone(m)
			continue
		}
		for w, word := range m {
			e.dense[w] |= word
		}
	}
	add := func(ids []int32) {
		if e.dense == nil && len(e.ids)+len(ids) > sparseLimit {
			e.dense = sample.NewMask(t.numTokens, e.ids...)
			e.ids = nil
		}
		if e.dense == nil {
			e.ids = append(e.ids, ids...)
			return
		}
		for _, id := range ids {
			e.dense.Set(id)
		}
	}
	// the loop reads the trie's and the DFA's arrays directly: it visits up to every node
	if cap(stack) < t.maxDepth+1 {
		stack = make([]uint32, t.maxDepth+1)
	}
	stack = stack[:t.maxDepth+1]
	stack[0] = q
	label, depth, ends, first, toks := t.label, t.depth, t.end, t.first, t.toks
	next, class, nclass, accept := d.next, &d.class, d.nclass, d.accept
scan:
	for i := 1; i < len(label); {
		end := int(ends[i])
		for k := range used {
			v := nodes[k][i]
			if dep := v >> 16; dep != 0 && dep <= depths[k] && v&0xffff < maxExitSets && exitOK[k]>>(v&0xffff)&1 != 0 {
				i = end // its tokens are in e.dense already
				continue scan
			}
		}
		dep := depth[i]
		s := next[int(stack[dep-1])*nclass+int(class[label[i]])]
		if s == 0 {
			i = end
			continue
		}
		stack[dep] = s
		if f0, f1 := first[i], first[i+1]; f0 < f1 {
			add(toks[f0:f1])
		}
		if end == i+1 {
			i++
			continue
		}
		if accept[s] {
			e.ends = append(e.ends, int32(i))
		}
		if l := &loops[s]; !l.empty() && l.contains(&t.belowSets[t.below[i]]) {
			add(toks[first[i+1]:first[end]])
			if accept[s] {
				for j := i + 1; j < end; j++ {
					if int(ends[j]) > j+1 {
						e.ends = append(e.ends, int32(j))
					}
				}
			}
			i = end
			continue
		}
		i++
	}
	if e.dense != nil && e.dense.Count(t.numTokens) <= sparseLimit {
		// few tokens after all (a reference's mask of short tokens): a list ORs faster
		for w, word := range e.dense {
			for ; word != 0; word &= word - 1 {
				e.ids = append(e.ids, int32(32*w+bits.TrailingZeros32(word)))
			}
		}
		e.dense = nil
	}
	return e
}

// walker computes the masks of one Masker, reusing its buffers.
type walker struct {
	g      *TokenGrammar
	c      *Compiled
	trie   *TokenTrie
	out    sample.Mask
	bufs   [][]item // item sets of the walk, by trie depth
	seeds  [][]item // the item set where a lexeme ends, by trie depth
	sets   [][]item
	stack  []uint32
	groups []itemGroup
}

func newWalker(g *TokenGrammar) *walker {
	return &walker{g: g, c: g.c, trie: g.trie, out: make(sample.Mask, sample.MaskWords(g.trie.numTokens))}
}

// mask computes the mask after the chart sets (ended: an end-of-generation token was
// accepted, so only end-of-generation tokens remain).
func (w *walker) mask(sets [][]item, ended bool) sample.Mask {
	clear(w.out)
	last := sets[len(sets)-1]
	if !ended {
		w.lexemes(sets)
	}
	if ended || w.c.accepting(last) || maskEmpty(w.out) {
		for _, id := range w.trie.eog {
			w.out.Set(id)
		}
	}
	return w.out
}

// maskEmpty reports whether m allows no token (it stops at the first word that allows one,
// where counting them read the whole mask).
func maskEmpty(m sample.Mask) bool {
	for _, word := range m {
		if word != 0 {
			return false
		}
	}
	return true
}

// lexemes adds, for every item waiting on a terminal, the tokens its lexeme allows and the
// tokens that end the lexeme and go on under the parser. Items waiting on one terminal in
// one DFA state share both: their cached token set, and one walk below each node where the
// lexeme ends, from the union of their item sets there (the tokens a union of item sets
// allows are the union of what each allows).
func (w *walker) lexemes(sets [][]item) {
	n := len(sets)
	w.groups = w.groups[:0]
	for _, x := range sets[n-1] {
		if x.lex == 0 {
			continue
		}
		key := lexKey{int32(w.c.posNext[x.pos].terminal()), x.lex}
		g := -1
		for i := range w.groups {
			if w.groups[i].key == key {
				g = i
			}
		}
		if g < 0 {
			g = len(w.groups)
			w.groups = append(w.groups, itemGroup{key: key})
		}
		w.groups[g].items = append(w.groups[g].items, x)
	}
	w.sets = append(w.sets[:0], sets...) // copied once; walks only append past n
	for _, grp := range w.groups {
		e := w.g.lexeme(grp.key.term, grp.key.q, w.stack)
		if e.dense != nil {
			for i, word := range e.dense {
				w.out[i] |= word
			}
		}
		for _, id := range e.ids {
			w.out.Set(id)
		}
		if len(e.ends) == 0 {
			continue
		}
		// the lexeme ends at trie node b: the items step over their terminal there
		for d := range w.seeds {
			w.seeds[d] = w.seeds[d][:0]
		}
		for _, b := range e.ends {
			d := int(w.trie.depth[b])
			for len(w.seeds) <= d {
				w.seeds = append(w.seeds, nil)
			}
			k := n - 1 + d // the chart position after the node's bytes
			w.sets = w.sets[:n]
			for len(w.sets) < k {
				w.sets = append(w.sets, nil) // positions inside the lexeme: never consulted
			}
			if len(w.seeds[d]) == 0 {
				seed := w.seeds[d][:0]
				for _, x := range grp.items {
					seed = addItem(seed, w.c.enter(x.pos+1, x.origin))
				}
				w.seeds[d] = w.c.closure(w.sets, seed, int32(k))
			}
			if !w.c.canContinue(w.seeds[d]) {
				continue // the output can end here, but nothing can follow
			}
			w.sets = append(w.sets, w.seeds[d])
			w.walk(int(b))
		}
	}
}

// itemGroup is the items of a set waiting on one terminal in one DFA state.
type itemGroup struct {
	key   lexKey
	items []item
}

// walk marks the tokens under trie node r whose bytes continue w.sets, whose last set is
// the state at r.
func (w *walker) walk(r int) {
	t := w.trie
	n0 := len(w.sets)
	d0 := int(t.depth[r])
	for i := r + 1; i < int(t.end[r]); {
		d := int(t.depth[i])
		w.sets = w.sets[:n0+d-d0-1]
		for len(w.bufs) <= d {
			w.bufs = append(w.bufs, nil)
		}
		set := w.c.scan(w.sets, t.label[i], w.bufs[d])
		if set == nil {
			i = int(t.end[i])
			continue
		}
		w.bufs[d] = set
		w.sets = append(w.sets, set)
		for _, id := range t.tokensAt(i) {
			w.out.Set(id)
		}
		i++
	}
}
