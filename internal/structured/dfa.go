package structured

import (
	"encoding/binary"
	"fmt"
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
	reps := make([]byte, nclass)
	for b := 255; b >= 0; b-- {
		reps[class[b]] = byte(b)
	}

	closure := func(set []int) []int {
		seen := map[int]bool{}
		var out []int
		stack := append([]int(nil), set...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] {
				continue
			}
			seen[s] = true
			out = append(out, s)
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
		for c := range nclass {
			b := reps[c]
			var moved []int
			for _, s := range sets[q] {
				if st := &a.states[s]; st.to >= 0 && st.set.has(b) {
					moved = append(moved, st.to)
				}
			}
			var to int
			if len(moved) > 0 {
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
	return trim(class, nclass, next, accept), nil
}

// byteClasses partitions the bytes so that bytes of one class behave alike in every move.
func byteClasses(a *nfa) ([256]uint8, int) {
	var class [256]uint8
	nclass := 1
	seen := map[byteSet]bool{}
	for _, st := range a.states {
		if st.to < 0 || seen[st.set] {
			continue
		}
		seen[st.set] = true
		remap := map[[2]int]int{}
		n := 0
		var fresh [256]uint8
		for b := range 256 {
			k := [2]int{int(class[b]), 0}
			if st.set.has(byte(b)) {
				k[1] = 1
			}
			c, ok := remap[k]
			if !ok {
				c = n
				remap[k] = c
				n++
			}
			fresh[b] = uint8(c)
		}
		class, nclass = fresh, n
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
