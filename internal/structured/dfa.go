package structured

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
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

// compileDFA builds the trimmed DFA of n within the state limits.
func compileDFA(n *node, maxNFA, maxDFA int, check func() error) (*dfa, error) {
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
	buckets := make([][]int, nclass)

	// closure returns the states reachable from set by epsilon moves, keeping only those
	// that matter to a DFA state: states with a byte move, and the final state. It reuses
	// a visit stamp per NFA state instead of a set.
	stamp := make([]uint32, len(a.states))
	gen := uint32(0)
	var stack []int
	closure := func(set []int) []int {
		gen++
		var out []int
		stack = append(stack[:0], set...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if stamp[s] == gen {
				continue
			}
			stamp[s] = gen
			if a.states[s].to >= 0 || s == s1 {
				out = append(out, s)
			}
			stack = append(stack, a.states[s].eps...)
		}
		sort.Ints(out)
		return out
	}
	key := func(set []int) string {
		buf := make([]byte, 0, 4*len(set))
		for _, s := range set {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(s))
		}
		return string(buf)
	}

	// raw DFA: state 0 is the empty set (dead)
	sets := [][]int{nil}
	index := map[string]int{key(nil): 0}
	var next []uint32
	var accept []bool
	first := closure([]int{s0})
	index[key(first)] = 1
	sets = append(sets, first)
	for q := 0; q < len(sets); q++ {
		if q%64 == 0 {
			if err := check(); err != nil {
				return nil, err
			}
		}
		acc := false
		for _, s := range sets[q] {
			if s == s1 {
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
				buckets[c] = append(buckets[c], a.states[st].to)
			}
		}
		for c := range nclass {
			var to int
			if moved := buckets[c]; len(moved) > 0 {
				cl := closure(moved)
				k := key(cl)
				var ok bool
				if to, ok = index[k]; !ok {
					if len(sets) >= maxDFA {
						return nil, fmt.Errorf("automaton over %d states", maxDFA)
					}
					to = len(sets)
					index[k] = to
					sets = append(sets, cl)
				}
			}
			next = append(next, uint32(to))
		}
	}
	return minimize(trim(class, nclass, next, accept)), nil
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
	live := make([]bool, n)
	for q := range n {
		live[q] = accept[q]
	}
	for changed := true; changed; {
		changed = false
		for q := range n {
			if live[q] {
				continue
			}
			for c := range nclass {
				if live[next[q*nclass+c]] {
					live[q] = true
					changed = true
					break
				}
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

// minimize merges equivalent states (Moore's partition refinement: states start split by
// whether they accept, and a block splits while its states move to different blocks on
// some class). The dead state stays 0 and alone: it is the only state from which nothing
// is accepted, since the DFA is trimmed.
func minimize(d *dfa) *dfa {
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
	nblocks := 0
	same := func(q, r int) bool { // q and r have the same signature under block
		if block[q] != block[r] {
			return false
		}
		for c := range d.nclass {
			if block[d.next[q*d.nclass+c]] != block[d.next[r*d.nclass+c]] {
				return false
			}
		}
		return true
	}
	for {
		index := map[uint64][]int{} // signature hash -> representatives
		fresh := make([]uint32, n)
		count := 0
		for q := range n {
			h := uint64(block[q])*0x9e3779b97f4a7c15 + 1
			for c := range d.nclass {
				h = (h ^ uint64(block[d.next[q*d.nclass+c]])) * 0x100000001b3
			}
			found := -1
			for _, r := range index[h] {
				if same(q, r) {
					found = r
					break
				}
			}
			if found >= 0 {
				fresh[q] = fresh[found]
				continue
			}
			index[h] = append(index[h], q)
			fresh[q] = uint32(count)
			count++
		}
		block = fresh
		if count == nblocks {
			break
		}
		nblocks = count
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

// withinEquivalence returns, for each state of d, a representative state that behaves the
// same on every input of at most k bytes: the same inputs keep it alive and the same ones
// end in an accepting state. A lexeme's mask entry (the tokens that stay inside it, the trie
// nodes where it may end) looks only at inputs as long as a token, so with k the longest
// token's length, states of one class share one entry. That is what makes counted
// repetitions cheap: in [^"]{0,1000} the states with more than k counts left are all alike,
// so one trie walk serves them all instead of one walk per count.
//
// It is Moore's partition refinement (see minimize) stopped after k rounds: after round i,
// two states share a block exactly when no input of at most i bytes tells them apart.
func withinEquivalence(d *dfa, k int) []uint32 {
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
	// same reports whether q and r have one signature under block: their blocks and the
	// blocks of their moves.
	same := func(q, r int) bool {
		if block[q] != block[r] {
			return false
		}
		for c := range d.nclass {
			if block[d.next[q*d.nclass+c]] != block[d.next[r*d.nclass+c]] {
				return false
			}
		}
		return true
	}
	fresh := make([]uint32, n)
	rep := make([]int, 0, n) // a state of each new block
	nblocks := 0             // blocks of the partition before the round
	for _, b := range []uint32{0, 1, 2} {
		if slices.Contains(block, b) {
			nblocks++
		}
	}
	for round := 0; round < k; round++ {
		index := map[uint64][]uint32{} // signature hash -> new blocks
		rep = rep[:0]
		for q := range n {
			h := uint64(block[q])*0x9e3779b97f4a7c15 + 1
			for c := range d.nclass {
				h = (h ^ uint64(block[d.next[q*d.nclass+c]])) * 0x100000001b3
			}
			found := false
			for _, b := range index[h] {
				if same(q, rep[b]) {
					fresh[q], found = b, true
					break
				}
			}
			if !found {
				b := uint32(len(rep))
				index[h] = append(index[h], b)
				rep = append(rep, q)
				fresh[q] = b
			}
		}
		block, fresh = fresh, block
		if len(rep) == nblocks {
			break // stable: no longer input tells more states apart
		}
		nblocks = len(rep)
	}
	out := make([]uint32, n)
	for q := range n {
		out[q] = uint32(rep[block[q]])
	}
	return out
}
