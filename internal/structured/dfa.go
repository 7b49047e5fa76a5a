package structured

import (
	"fmt"
	"slices"
)

// A terminal (lexeme) is a regular expression over bytes, matched by a deterministic finite
// automaton. Expressions become Thompson NFAs, NFAs become DFAs by the subset construction
// over byte equivalence classes, and DFAs are trimmed so that every state but the dead one
// can still reach an accepting state: a live state is then exactly a viable prefix.

// nfaState is one state of a Thompson NFA: epsilon moves and at most one byte-set move.
type nfaState struct {
	eps  []int
	set  byteSet
	to   int // -1: no byte move
	used bool
}

type nfa struct {
	states []nfaState
	limit  int
}

func (a *nfa) add() (int, error) {
	if len(a.states) >= a.limit {
		return 0, fmt.Errorf("automaton over %d states", a.limit)
	}
	a.states = append(a.states, nfaState{to: -1})
	return len(a.states) - 1, nil
}

// build adds n's automaton between a new start and end state.
func (a *nfa) build(n *node) (start, end int, err error) {
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
		a.states[start].set, a.states[start].to = n.set, end
	case opConcat:
		end = start
		for _, s := range n.subs {
			s0, s1, err := a.build(s)
			if err != nil {
				return 0, 0, err
			}
			a.states[end].eps = append(a.states[end].eps, s0)
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
			a.states[start].eps = append(a.states[start].eps, s0)
			a.states[s1].eps = append(a.states[s1].eps, end)
		}
	case opRepeat:
		end = start
		sub := n.subs[0]
		for range n.min {
			s0, s1, err := a.build(sub)
			if err != nil {
				return 0, 0, err
			}
			a.states[end].eps = append(a.states[end].eps, s0)
			end = s1
		}
		if n.max < 0 { // a loop: end -> sub -> end
			s0, s1, err := a.build(sub)
			if err != nil {
				return 0, 0, err
			}
			loop, err := a.add()
			if err != nil {
				return 0, 0, err
			}
			a.states[end].eps = append(a.states[end].eps, loop)
			a.states[loop].eps = append(a.states[loop].eps, s0)
			a.states[s1].eps = append(a.states[s1].eps, loop)
			end = loop
			break
		}
		// max-min optional copies, each of which may skip to the common end
		final, err := a.add()
		if err != nil {
			return 0, 0, err
		}
		for range n.max - n.min {
			s0, s1, err := a.build(sub)
			if err != nil {
				return 0, 0, err
			}
			a.states[end].eps = append(a.states[end].eps, s0, final)
			end = s1
		}
		a.states[end].eps = append(a.states[end].eps, final)
		end = final
	default:
		return 0, 0, fmt.Errorf("internal error: rule reference inside a terminal")
	}
	return start, end, nil
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
}

func (d *dfa) step(q uint32, b byte) uint32 { return d.next[int(q)*d.nclass+int(d.class[b])] }

func (d *dfa) numStates() int { return len(d.accept) }

// compileDFA builds the minimal trimmed DFA of n within the state limits.
func compileDFA(n *node, maxNFA, maxDFA int, check func() error) (*dfa, error) {
	d, err := determinize(n, maxNFA, maxDFA, check)
	if err != nil {
		return nil, err
	}
	return minimize(d), nil
}

// determinize builds the trimmed DFA of n by the subset construction over n's Thompson NFA.
func determinize(n *node, maxNFA, maxDFA int, check func() error) (*dfa, error) {
	a := &nfa{limit: maxNFA}
	s0, s1, err := a.build(n)
	if err != nil {
		return nil, err
	}
	class, nclass := byteClasses(a)
	// classesOf[s]: the classes of the bytes of state s's byte move
	classesOf := make([][]uint8, len(a.states))
	for i := range a.states {
		st := &a.states[i]
		if st.to < 0 {
			continue
		}
		var seen [256]bool
		for b := range 256 {
			if c := class[b]; st.set.has(byte(b)) && !seen[c] {
				seen[c] = true
				classesOf[i] = append(classesOf[i], c)
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
			if a.states[s].to >= 0 || int(s) == s1 {
				buf = append(buf, s)
			}
			for _, e := range a.states[s].eps {
				stack = append(stack, int32(e))
			}
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

	// raw DFA: state 0 is the empty set (dead); index maps a set's hash to its states
	sets := [][]int32{nil}
	index := map[uint64][]int32{}
	var next []uint32
	var accept []bool
	first := slices.Clone(closure([]int32{int32(s0)}))
	index[hash(first)] = []int32{1}
	sets = append(sets, first)
	// the classes of one DFA state often move to the same NFA states: their targets are
	// looked up once (moved[i] is a class already seen, by the hash of its moves)
	type seenMove struct {
		h  uint64
		c  int
		to uint32
	}
	var moved []seenMove
	for q := 0; q < len(sets); q++ {
		if q%64 == 0 {
			if err := check(); err != nil {
				return nil, err
			}
		}
		acc := false
		for _, s := range sets[q] {
			if int(s) == s1 {
				acc = true
			}
		}
		accept = append(accept, acc)
		// gather each class's moves in one pass over the subset's byte moves
		for c := range buckets {
			buckets[c] = buckets[c][:0]
		}
		for _, st := range sets[q] {
			for _, c := range classesOf[st] {
				buckets[c] = append(buckets[c], int32(a.states[st].to))
			}
		}
		moved = moved[:0]
	classes:
		for c := range nclass {
			mv := buckets[c]
			if len(mv) == 0 {
				next = append(next, 0)
				continue
			}
			hm := hash(mv)
			for _, m := range moved {
				if m.h == hm && slices.Equal(buckets[m.c], mv) {
					next = append(next, m.to)
					continue classes
				}
			}
			cl := closure(mv)
			h := hash(cl)
			to := -1
			for _, r := range index[h] {
				if slices.Equal(sets[r], cl) {
					to = int(r)
					break
				}
			}
			if to < 0 {
				if len(sets) >= maxDFA {
					return nil, fmt.Errorf("automaton over %d states", maxDFA)
				}
				to = len(sets)
				index[h] = append(index[h], int32(to))
				sets = append(sets, slices.Clone(cl))
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
		if st.to < 0 || seen[st.set] {
			continue
		}
		seen[st.set] = true
		// split every class by membership in st.set: (old class, in set) -> new class
		for i := range 2 * nclass {
			remap[i] = -1
		}
		n := 0
		for b := range 256 {
			k := 2 * int(class[b])
			if st.set.has(byte(b)) {
				k++
			}
			if remap[k] < 0 {
				remap[k] = n
				n++
			}
			class[b] = uint8(remap[k])
		}
		nclass = n
	}
	return class, nclass
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
	block, nblocks := refine(d, -1, maxMinimizeWork)
	if block == nil {
		return d
	}
	if nblocks == n {
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
		accept: make([]bool, nblocks), hasOut: make([]bool, nblocks), start: order[block[d.start]]}
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
	block, nblocks := refine(d, k, maxWork)
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
