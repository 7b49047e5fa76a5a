package structured

import (
	"fmt"
	"slices"
)

// A terminal (lexeme) is a regular expression over bytes, matched by a deterministic finite
// automaton. Expressions become Thompson NFAs, NFAs become DFAs by the subset construction
// over byte equivalence classes, and DFAs are trimmed so that every state but the dead one
// can still reach an accepting state: a live state is then exactly a viable prefix.

// nfaMove is a byte-set move of an NFA state.
type nfaMove struct {
	set byteSet
	to  int32
}

// nfaState is one state of an NFA: epsilon moves and byte-set moves (Thompson's states
// have at most one; an automaton embedded whole, see fragments, has one per target).
type nfaState struct {
	eps   []int32
	moves []nfaMove
}

type nfa struct {
	states []nfaState
	limit  int
	// frags, when not nil, supplies the automata of subexpressions to embed instead of
	// building their Thompson NFAs; root is the expression being compiled (never embedded
	// in itself).
	frags *fragments
	root  *node
}

func (a *nfa) add() (int, error) {
	if len(a.states) >= a.limit {
		return 0, fmt.Errorf("automaton over %d states", a.limit)
	}
	a.states = append(a.states, nfaState{})
	return len(a.states) - 1, nil
}

func (a *nfa) move(from int, set byteSet, to int) {
	a.states[from].moves = append(a.states[from].moves, nfaMove{set, int32(to)})
}

func (a *nfa) eps(from int, to ...int) {
	for _, t := range to {
		a.states[from].eps = append(a.states[from].eps, int32(t))
	}
}

// build adds n's automaton between a new start and end state.
func (a *nfa) build(n *node) (start, end int, err error) {
	return a.buildPart(n, false)
}

// buildPart is build; body says n is the body of a repetition (see fragments.eligible).
func (a *nfa) buildPart(n *node, body bool) (start, end int, err error) {
	if a.frags != nil && n != a.root && a.frags.eligible(n, body) {
		d, err := a.frags.get(n)
		if err != nil {
			return 0, 0, err
		}
		if d != nil {
			return a.embed(d)
		}
	}
	if start, err = a.add(); err != nil {
		return
	}
	switch n.op {
	case opEmpty:
		end = start
	case opBytes:
		if end, err = a.add(); err != nil {
			return
		}
		a.move(start, n.set, end)
	case opConcat:
		end = start
		for _, s := range n.subs {
			s0, s1, err := a.build(s)
			if err != nil {
				return 0, 0, err
			}
			a.eps(end, s0)
			end = s1
		}
	case opAlt:
		if end, err = a.add(); err != nil {
			return
		}
		for _, s := range n.subs {
			s0, s1, err := a.build(s)
			if err != nil {
				return 0, 0, err
			}
			a.eps(start, s0)
			a.eps(s1, end)
		}
	case opRepeat:
		end = start
		sub := n.subs[0]
		for range n.min {
			s0, s1, err := a.buildPart(sub, true)
			if err != nil {
				return 0, 0, err
			}
			a.eps(end, s0)
			end = s1
		}
		if n.max < 0 { // a loop: end -> sub -> end
			s0, s1, err := a.buildPart(sub, true)
			if err != nil {
				return 0, 0, err
			}
			loop, err := a.add()
			if err != nil {
				return 0, 0, err
			}
			a.eps(end, loop)
			a.eps(loop, s0)
			a.eps(s1, loop)
			end = loop
			break
		}
		// max-min optional copies, each of which may skip to the common end
		final, err := a.add()
		if err != nil {
			return 0, 0, err
		}
		for range n.max - n.min {
			s0, s1, err := a.buildPart(sub, true)
			if err != nil {
				return 0, 0, err
			}
			a.eps(end, s0, final)
			end = s1
		}
		a.eps(end, final)
		end = final
	default:
		return 0, 0, fmt.Errorf("internal error: rule reference inside a terminal")
	}
	return start, end, nil
}

// embed adds a copy of the trimmed DFA d as an NFA fragment: one state per live state of d
// with one move per target, and epsilon moves from the accepting states to a new end.
func (a *nfa) embed(d *dfa) (start, end int, err error) {
	n := d.numStates()
	if len(a.states)+n+1 > a.limit {
		return 0, 0, fmt.Errorf("automaton over %d states", a.limit)
	}
	if d.start == 0 { // the empty language: a start with no way to the end
		if start, err = a.add(); err != nil {
			return
		}
		end, err = a.add()
		return
	}
	base := len(a.states) - 1 // d's state q is base+q (the dead state 0 has no copy)
	for range n - 1 {
		a.add()
	}
	end, _ = a.add()
	classBytes := d.classBytes()
	for q := 1; q < n; q++ {
		from := base + q
		row := d.next[q*d.nclass : (q+1)*d.nclass]
		first := len(a.states[from].moves)
		for c, t := range row {
			if t == 0 {
				continue
			}
			to := int32(base + int(t))
			merged := false
			for i := first; i < len(a.states[from].moves); i++ {
				if m := &a.states[from].moves[i]; m.to == to {
					m.set.union(&classBytes[c])
					merged = true
					break
				}
			}
			if !merged {
				a.move(from, classBytes[c], int(to))
			}
		}
		if d.accept[q] {
			a.eps(from, end)
		}
	}
	return base + int(d.start), end, nil
}

// dfa is a trimmed deterministic automaton over bytes. State 0 is the dead state (every
// move from it returns to it); start is the initial state.
type dfa struct {
	class  [256]uint8 // byte -> equivalence class
	nclass int
	next   []uint32 // next[state*nclass+class]
	accept []bool
	hasOut []bool // some byte leads to a live state
	start  uint32
	// stable is 1 + the number of refinement rounds after which no two of d's states are
	// alike (see refine) when d is minimal and that is known, else 0: no input longer than
	// stable-1 bytes tells apart states that shorter ones do not.
	stable int
}

func (d *dfa) step(q uint32, b byte) uint32 { return d.next[int(q)*d.nclass+int(d.class[b])] }

func (d *dfa) numStates() int { return len(d.accept) }

// classBytes returns the bytes of each of d's byte classes.
func (d *dfa) classBytes() []byteSet {
	out := make([]byteSet, d.nclass)
	for b := range 256 {
		out[d.class[b]].add(byte(b))
	}
	return out
}

// compileDFA builds the minimal trimmed DFA of n within the state limits.
func compileDFA(n *node, maxNFA, maxDFA int, check func() error) (*dfa, error) {
	return compileDFAWith(n, nil, maxNFA, maxDFA, check)
}

// compileDFAWith is compileDFA embedding the automata of n's subexpressions that frags
// supplies (nil: none).
//
// With frags, the automaton is built directly where n allows (see direct), else by the subset
// construction; both are then minimized, so the result is the same.
func compileDFAWith(n *node, frags *fragments, maxNFA, maxDFA int, check func() error) (*dfa, error) {
	var d *dfa
	err := errNotDirect
	if frags != nil {
		d, err = directDFA(n, frags, maxNFA, check)
		if err == nil && d.numStates() > maxDFA {
			err = errNotDirect // the subset construction's raw automaton may be smaller
		}
	}
	if err == errNotDirect {
		d, err = determinizeWith(n, frags, maxNFA, maxDFA, check)
	}
	if err != nil {
		return nil, err
	}
	return minimize(d), nil
}

// determinize builds the trimmed DFA of n by the subset construction over n's Thompson NFA.
func determinize(n *node, maxNFA, maxDFA int, check func() error) (*dfa, error) {
	return determinizeWith(n, nil, maxNFA, maxDFA, check)
}

// determinizeWith is determinize over an NFA that embeds the automata frags supplies.
func determinizeWith(n *node, frags *fragments, maxNFA, maxDFA int, check func() error) (*dfa, error) {
	a := &nfa{limit: maxNFA, frags: frags, root: n}
	s0, s1, err := a.build(n)
	if err != nil {
		return nil, err
	}
	class, nclass := byteClasses(a)
	// rep[c] is a byte of class c: every move's set holds all of a class or none of it
	var rep [256]byte
	for b := 255; b >= 0; b-- {
		rep[class[b]] = byte(b)
	}
	// classMoves[s]: state s's byte moves as (class, target) pairs
	type classMove struct {
		c  uint8
		to int32
	}
	classMoves := make([][]classMove, len(a.states))
	for i := range a.states {
		for _, m := range a.states[i].moves {
			for c := range nclass {
				if m.set.has(rep[c]) {
					classMoves[i] = append(classMoves[i], classMove{uint8(c), m.to})
				}
			}
		}
	}
	buckets := make([][]int32, nclass)

	// closure computes into buf the states reachable from set by epsilon moves, keeping
	// only those that matter to a DFA state (states with a byte move, and the final state),
	// sorted. It reuses a visit stamp per NFA state instead of a set.
	stamp := make([]uint32, len(a.states))
	gen := uint32(0)
	var stack []int32
	var buf []int32
	closure := func(set []int32) []int32 {
		gen++
		buf = buf[:0]
		stack = append(stack[:0], set...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if stamp[s] == gen {
				continue
			}
			stamp[s] = gen
			if len(a.states[s].moves) > 0 || int(s) == s1 {
				buf = append(buf, s)
			}
			stack = append(stack, a.states[s].eps...)
		}
		slices.Sort(buf)
		return buf
	}
	hash := func(set []int32) uint64 {
		h := uint64(fnvOffset)
		for _, s := range set {
			h = (h ^ uint64(s)) * 1099511628211
		}
		return h
	}

	// raw DFA: state 0 is the empty set (dead). The subsets are kept end to end in
	// setData (state q's is setData[setAt[q]:setAt[q+1]]); index maps a subset's hash to
	// the first state of that hash and chain links the others.
	setData := make([]int32, 0, 4*len(a.states))
	setAt := []int32{0, 0}
	set := func(q int) []int32 { return setData[setAt[q]:setAt[q+1]] }
	index := map[uint64]int32{}
	chain := []int32{-1}
	// single[t] is 1 + the state of the subset closure({t}) once known: in automata
	// embedded whole most moves lead to one NFA state, and their closure and lookup are
	// then done once
	single := make([]int32, len(a.states))
	next := make([]uint32, 0, 4*nclass)
	accept := make([]bool, 0, 4)
	lookup := func(cl []int32) (int, error) {
		h := hash(cl)
		head, ok := index[h]
		if !ok {
			head = -1
		}
		for r := head; r >= 0; r = chain[r] {
			if slices.Equal(set(int(r)), cl) {
				return int(r), nil
			}
		}
		q := len(setAt) - 1
		if q >= maxDFA {
			return 0, fmt.Errorf("automaton over %d states", maxDFA)
		}
		setData = append(setData, cl...)
		setAt = append(setAt, int32(len(setData)))
		index[h] = int32(q)
		chain = append(chain, head)
		return q, nil
	}
	if _, err := lookup(closure([]int32{int32(s0)})); err != nil {
		return nil, err
	}
	// the classes of one DFA state often move to the same NFA states: their targets are
	// looked up once (moved[i] is a class already seen, by the hash of its moves)
	type seenMove struct {
		h  uint64
		c  int
		to uint32
	}
	var moved []seenMove
	for q := 0; q < len(setAt)-1; q++ {
		if q%64 == 0 {
			if err := check(); err != nil {
				return nil, err
			}
		}
		acc := false
		for _, s := range set(q) {
			if int(s) == s1 {
				acc = true
			}
		}
		accept = append(accept, acc)
		// gather each class's moves in one pass over the subset's byte moves
		for c := range buckets {
			buckets[c] = buckets[c][:0]
		}
		for _, st := range set(q) {
			for _, m := range classMoves[st] {
				buckets[m.c] = append(buckets[m.c], m.to)
			}
		}
		moved = moved[:0]
	classes:
		for c := range nclass {
			mv := buckets[c]
			switch {
			case len(mv) == 0:
				next = append(next, 0)
				continue
			case len(mv) == 1 && single[mv[0]] > 0:
				next = append(next, uint32(single[mv[0]]-1))
				continue
			}
			hm := hash(mv)
			for _, m := range moved {
				if m.h == hm && slices.Equal(buckets[m.c], mv) {
					next = append(next, m.to)
					continue classes
				}
			}
			to, err := lookup(closure(mv))
			if err != nil {
				return nil, err
			}
			if len(mv) == 1 {
				single[mv[0]] = int32(to) + 1
			}
			moved = append(moved, seenMove{hm, c, uint32(to)})
			next = append(next, uint32(to))
		}
	}
	return trim(class, nclass, next, accept), nil
}

// byteClasses partitions the bytes so that bytes of one class behave alike in every move.
func byteClasses(a *nfa) ([256]uint8, int) {
	var class [256]uint8
	nclass := 1
	seen := map[byteSet]bool{}
	remap := make([]int, 2*256)
	for _, st := range a.states {
		for _, m := range st.moves {
			if seen[m.set] {
				continue
			}
			seen[m.set] = true
			nclass = splitClasses(&class, nclass, &m.set, remap)
		}
	}
	return class, nclass
}

// splitClasses splits every class of class by membership in set, returning the new number
// of classes: (old class, in set) -> new class.
func splitClasses(class *[256]uint8, nclass int, set *byteSet, remap []int) int {
	for i := range 2 * nclass {
		remap[i] = -1
	}
	n := 0
	for b := range 256 {
		k := 2 * int(class[b])
		if set.has(byte(b)) {
			k++
		}
		if remap[k] < 0 {
			remap[k] = n
			n++
		}
		class[b] = uint8(remap[k])
	}
	return n
}

// trim keeps the states that can reach an accepting state, numbering the dead state 0.
func trim(class [256]uint8, nclass int, next []uint32, accept []bool) *dfa {
	n := len(accept)
	// live states: those an accepting state is reached from, found by a search backwards
	// from the accepting states over the moves reversed (CSR lists of predecessors)
	start := make([]int32, n+1)
	for _, t := range next {
		start[t+1]++
	}
	for q := range n {
		start[q+1] += start[q]
	}
	preds := make([]int32, len(next))
	fill := slices.Clone(start[:n])
	for i, t := range next {
		preds[fill[t]] = int32(i / nclass)
		fill[t]++
	}
	live := make([]bool, n)
	var queue []int32
	for q := range n {
		if accept[q] {
			live[q] = true
			queue = append(queue, int32(q))
		}
	}
	for len(queue) > 0 {
		t := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, p := range preds[start[t]:start[t+1]] {
			if !live[p] {
				live[p] = true
				queue = append(queue, p)
			}
		}
	}
	newID := make([]uint32, n)
	d := &dfa{class: class, nclass: nclass}
	d.accept = append(d.accept, false) // dead
	count := uint32(1)
	for q := 1; q < n; q++ {
		if live[q] {
			newID[q] = count
			count++
			d.accept = append(d.accept, accept[q])
		}
	}
	d.next = make([]uint32, int(count)*nclass)
	d.hasOut = make([]bool, count)
	for q := 1; q < n; q++ {
		if !live[q] {
			continue
		}
		nq := newID[q]
		for c := range nclass {
			to := newID[next[q*nclass+c]]
			d.next[int(nq)*nclass+c] = to
			if to != 0 {
				d.hasOut[nq] = true
			}
		}
	}
	d.start = newID[1]
	return d
}

// minimize merges equivalent states (see refine); a DFA whose refinement would cost more
// than maxMinimizeWork is returned as it is (it matches the same language).
func minimize(d *dfa) *dfa {
	n := d.numStates()
	block, nblocks, rounds := refine(d, -1, maxMinimizeWork)
	if block == nil {
		return d
	}
	if nblocks == n {
		d.stable = rounds + 1
		return d
	}
	// renumber so that the dead state's block is 0
	order := make([]uint32, nblocks)
	for i := range order {
		order[i] = ^uint32(0)
	}
	next := uint32(0)
	for q := range n {
		if order[block[q]] == ^uint32(0) {
			order[block[q]] = next
			next++
		}
	}
	m := &dfa{class: d.class, nclass: d.nclass, next: make([]uint32, nblocks*d.nclass),
		accept: make([]bool, nblocks), hasOut: make([]bool, nblocks), start: order[block[d.start]],
		stable: rounds + 1}
	for q := range n {
		b := order[block[q]]
		m.accept[b] = d.accept[q]
		m.hasOut[b] = d.hasOut[q]
		for c := range d.nclass {
			m.next[int(b)*d.nclass+c] = order[block[d.next[q*d.nclass+c]]]
		}
	}
	return m
}

// maxMinimizeWork bounds the work of minimizing one automaton (in signature entries, see
// refine: about a second).
const maxMinimizeWork = 1 << 28

// withinEquivalence returns, for each state of d, a representative state that behaves the
// same on every input of at most k bytes: the same inputs keep it alive and the same ones
// end in an accepting state (nil when the refinement would cost more than maxWork). A
// lexeme's mask entry (the tokens that stay inside it, the trie nodes where it may end)
// looks only at inputs as long as a token, so with k the longest token's length, states of
// one class share one entry. That is what makes counted repetitions cheap: in [^"]{0,1000}
// the states with more than k counts left are all alike, so one trie walk serves them all
// instead of one walk per count.
//
// It is refine stopped after k rounds; the representative is each block's first state.
func withinEquivalence(d *dfa, k, maxWork int) []uint32 {
	block, nblocks, _ := refine(d, k, maxWork)
	if block == nil {
		return nil
	}
	first := make([]int64, nblocks)
	for i := range first {
		first[i] = -1
	}
	out := make([]uint32, len(block))
	for q, b := range block {
		if first[b] < 0 {
			first[b] = int64(q)
		}
		out[q] = uint32(first[b])
	}
	return out
}
