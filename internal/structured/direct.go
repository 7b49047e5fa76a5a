package structured

import (
	"errors"
	"slices"
)

// direct builds the DFA of an expression without a Thompson NFA: it builds from right to
// left, each part followed by the automaton of what comes after it (its continuation), so
// that a state is made once with its final moves. Where the expression may go on in two
// ways on one byte (an alternative or a repetition whose next parts begin alike, "ab" |
// "ac"), the states are merged (see merge), and only those merged states go through a
// subset construction. It gives up (errNotDirect, and the subset construction over the
// NFA runs) on a rule reference, a loop whose body matches only the empty string, or a
// table over its limits.
//
// The terminals of JSON Schemas are mostly sequences with few merges: a key, a JSON string
// of a counted length (the character cannot begin with the closing quote), enum values,
// the key tries that exclude named properties. For them the subset construction's NFA, its
// closures and subset lookups were most of the compile time (a string of maxLength 400:
// 5,600 states, each a subset of NFA states to hash and look up). The automaton built is
// deterministic and reachable but not always minimal; minimize follows as before, so the
// result is the same minimal automaton.
type direct struct {
	class  [256]uint8
	rep    []byte // a byte of each class
	nclass int
	next   []uint32 // next[state*nclass+class]; state 0 is the dead state
	accept []bool
	// loop marks the state of an unbounded repetition (see repeat): a merged state whose
	// members are known only once the repetition's body is built, so that other sets hold
	// it as a member of its own until finish expands it.
	loop []bool
	// a merged state's members are sets[setAt[q]:setAt[q]+setLen[q]] (setAt -1: a built
	// state); memo finds merged states by the hash of their members
	setAt, setLen []int32
	sets          []uint32
	memo          map[uint64][]uint32
	one           [1]uint32
	scratch       []uint32
	targets       []uint32
	expanded      []uint32
	limit         int
	frags         *fragments
	root          *node
	check         func() error
	steps         int
}

// maxDirectEntries bounds the table of a direct build (states times byte classes: 32 MiB),
// about what the subset construction's raw automaton may reach within the state limits.
const maxDirectEntries = 1 << 23

// errNotDirect says the expression needs the subset construction.
var errNotDirect = errors.New("not deterministic by construction")

// directDFA returns the trimmed DFA of n built by direct (not minimized), or errNotDirect,
// or the error of check.
func directDFA(n *node, frags *fragments, limit int, check func() error) (*dfa, error) {
	b := &direct{limit: limit, frags: frags, root: n, check: check, memo: map[uint64][]uint32{}}
	if err := b.classes(n); err != nil {
		return nil, err
	}
	// the tables of the previous automaton's build are reused (the fragments n embeds were
	// built by classes, so no other build is under way)
	if frags != nil && frags.spare != nil {
		s := frags.spare
		frags.spare = nil
		b.next, b.accept, b.loop, b.setAt, b.setLen, b.sets = s.next[:0], s.accept[:0], s.loop[:0], s.setAt[:0], s.setLen[:0], s.sets[:0]
	}
	b.newState() // dead
	end := b.newState()
	b.accept[end] = true
	start, err := b.build(n, end)
	var d *dfa
	if err == nil {
		d, err = b.finish(start)
	}
	if frags != nil {
		b.memo, b.frags, b.root, b.check = nil, nil, nil, nil
		frags.spare = b
	}
	return d, err
}

// classes partitions the bytes by every byte set of n and of the automata it embeds.
func (b *direct) classes(n *node) error {
	nclass := 1
	var remap [2 * 256]int
	// the sets and inner nodes seen, in maps kept for the compile's next builds
	seen, visited := map[byteSet]bool{}, map[*node]bool{}
	if b.frags != nil {
		if b.frags.seenSets == nil {
			b.frags.seenSets, b.frags.seenNodes = map[byteSet]bool{}, map[*node]bool{}
		}
		seen, visited = b.frags.seenSets, b.frags.seenNodes
		b.frags.seenSets, b.frags.seenNodes = nil, nil // a fragment built below uses its own
		defer func() {
			clear(seen)
			clear(visited)
			b.frags.seenSets, b.frags.seenNodes = seen, visited
		}()
	}
	split := func(s *byteSet) {
		if !seen[*s] {
			seen[*s] = true
			nclass = splitClasses(&b.class, nclass, s, remap[:])
		}
	}
	var walk func(n *node) error
	walk = func(n *node) error {
		if n.op == opBytes {
			split(&n.set)
			return nil
		}
		if visited[n] {
			return nil
		}
		visited[n] = true
		if d, err := b.fragment(n); err != nil {
			return err
		} else if d != nil {
			for _, s := range d.classBytes() {
				split(&s)
			}
			return nil
		}
		if n.op == opRef {
			return errNotDirect
		}
		for _, s := range n.subs {
			if err := walk(s); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(n); err != nil {
		return err
	}
	b.nclass = nclass
	b.rep = make([]byte, nclass)
	for c := 255; c >= 0; c-- {
		b.rep[b.class[c]] = byte(c)
	}
	return nil
}

// fragment returns the minimal automaton to embed for n (a rule's body shared by the
// terminals that inline it, see fragments), or nil.
func (b *direct) fragment(n *node) (*dfa, error) {
	if b.frags == nil || n == b.root || !b.frags.shared[n] || !b.frags.eligible(n, false) {
		return nil, nil
	}
	return b.frags.get(n)
}

func (b *direct) newState() uint32 {
	q := uint32(len(b.accept))
	b.next = slices.Grow(b.next, b.nclass)
	b.next = b.next[:len(b.next)+b.nclass]
	clear(b.next[len(b.next)-b.nclass:])
	b.accept = append(b.accept, false)
	b.loop = append(b.loop, false)
	b.setAt = append(b.setAt, -1)
	return q
}

func (b *direct) row(q uint32) []uint32 {
	return b.next[int(q)*b.nclass : (int(q)+1)*b.nclass]
}

// grow counts a new state against the limit and the time check.
func (b *direct) grow() error {
	if len(b.accept) >= b.limit || len(b.next) >= maxDirectEntries {
		return errNotDirect // the subset construction judges the limits
	}
	b.steps++
	if b.steps%256 == 0 {
		return b.check()
	}
	return nil
}

// members returns the states that q stands for in a set: a merged state's members, else
// q itself (a built state, or a loop).
func (b *direct) members(q uint32) []uint32 {
	if b.setAt[q] < 0 || b.loop[q] {
		b.one[0] = q
		return b.one[:]
	}
	return b.set(q)
}

func (b *direct) set(q uint32) []uint32 {
	return b.sets[b.setAt[q] : b.setAt[q]+b.setLen[q]]
}

// merge returns the state that moves as all of qs do, accepting where one of them is: a
// state of their own when they are one, else the merged state of the union of their
// members (one per set, made once). A merged state's moves are computed only once every
// state is built (see finish): they combine the members' moves, merging again where two
// members move on one byte to different states. This is the subset construction, but
// over the few states where the expression may go on in two ways instead of over every
// state of an NFA.
func (b *direct) merge(qs ...uint32) (uint32, error) {
	set := b.scratch[:0]
	for _, q := range qs {
		set = append(set, b.members(q)...)
	}
	slices.Sort(set)
	set = slices.Compact(set)
	b.scratch = set
	if len(set) == 1 {
		return set[0], nil
	}
	return b.mergedState(set)
}

// expand returns the built states of set, each loop replaced by its members (a loop's
// members may hold loops, itself included), sorted.
func (b *direct) expand(set []uint32) []uint32 {
	out := b.expanded[:0]
	var seen []uint32
	var walk func(set []uint32)
	walk = func(set []uint32) {
		for _, m := range set {
			if !b.loop[m] {
				out = append(out, m)
				continue
			}
			if slices.Contains(seen, m) {
				continue
			}
			seen = append(seen, m)
			walk(b.set(m))
		}
	}
	walk(set)
	slices.Sort(out)
	out = slices.Compact(out)
	b.expanded = out
	return out
}

// mergedState returns the merged state of set (sorted, of built states only).
func (b *direct) mergedState(set []uint32) (uint32, error) {
	h := uint64(fnvOffset)
	for _, s := range set {
		h = (h ^ uint64(s)) * 1099511628211
	}
	for _, q := range b.memo[h] {
		if slices.Equal(b.members(q), set) {
			return q, nil
		}
	}
	if err := b.grow(); err != nil {
		return 0, err
	}
	q := b.newState()
	b.setAt[q] = int32(len(b.sets))
	b.sets = append(b.sets, set...)
	for len(b.setLen) < len(b.accept) {
		b.setLen = append(b.setLen, 0)
	}
	b.setLen[q] = int32(len(set))
	b.memo[h] = append(b.memo[h], q)
	return q, nil
}

// fill computes merged state q's moves and acceptance from its members'.
func (b *direct) fill(q uint32) error {
	set := b.set(q)
	if b.loop[q] || slices.ContainsFunc(set, func(m uint32) bool { return b.loop[m] }) {
		set = slices.Clone(b.expand(set))
	}
	acc := false
	for _, m := range set {
		acc = acc || b.accept[m]
	}
	b.accept[q] = acc
	nc := b.nclass
	for c := range nc {
		var t uint32
		multi := false
		for _, m := range set {
			u := b.next[int(m)*nc+c]
			if u != 0 && u != t {
				if t != 0 {
					multi = true
					break
				}
				t = u
			}
		}
		if multi {
			targets := b.targets[:0]
			for _, m := range set {
				if u := b.next[int(m)*nc+c]; u != 0 {
					targets = append(targets, b.members(u)...)
				}
			}
			b.targets = targets
			var err error
			if t, err = b.mergedSet(b.expand(targets)); err != nil {
				return err
			}
		}
		b.next[int(q)*nc+c] = t
	}
	return nil
}

// mergedSet is mergedState for a set of built states, which may be one.
func (b *direct) mergedSet(set []uint32) (uint32, error) {
	if len(set) == 1 {
		return set[0], nil
	}
	return b.mergedState(set)
}

// build returns the state that matches n followed by what state k matches.
func (b *direct) build(n *node, k uint32) (uint32, error) {
	if d, err := b.fragment(n); err != nil {
		return 0, err
	} else if d != nil {
		return b.embed(d, k)
	}
	switch n.op {
	case opEmpty:
		return k, nil
	case opBytes:
		if err := b.grow(); err != nil {
			return 0, err
		}
		q := b.newState()
		row := b.row(q)
		for c, r := range b.rep {
			if n.set.has(r) {
				row[c] = k
			}
		}
		return q, nil
	case opConcat:
		for i := len(n.subs) - 1; i >= 0; i-- {
			var err error
			if k, err = b.build(n.subs[i], k); err != nil {
				return 0, err
			}
		}
		return k, nil
	case opAlt:
		alts := make([]uint32, len(n.subs))
		for i, sub := range n.subs {
			var err error
			if alts[i], err = b.build(sub, k); err != nil {
				return 0, err
			}
		}
		return b.merge(alts...)
	case opRepeat:
		return b.repeat(n, k)
	}
	return 0, errNotDirect
}

// repeat builds sub{min,max} followed by k: the optional copies as nested alternatives
// (k | sub (k | sub (...))), then the required ones; an unbounded repetition as a loop
// state L = k | sub L, whose moves are known once sub's copy leading back to it is built.
func (b *direct) repeat(n *node, k uint32) (uint32, error) {
	sub := n.subs[0]
	q := k
	if n.max < 0 {
		if err := b.grow(); err != nil {
			return 0, err
		}
		loop := b.newState()
		b.loop[loop] = true
		s, err := b.build(sub, loop)
		if err != nil {
			return 0, err
		}
		if s == loop {
			return 0, errNotDirect // sub matches only the empty string
		}
		// the loop state is the merged state of s and k
		set := slices.Clone(b.members(s))
		set = append(set, b.members(k)...)
		slices.Sort(set)
		set = slices.Compact(set)
		b.setAt[loop] = int32(len(b.sets))
		b.sets = append(b.sets, set...)
		for len(b.setLen) < len(b.accept) {
			b.setLen = append(b.setLen, 0)
		}
		b.setLen[loop] = int32(len(set))
		q = loop
	} else {
		for range n.max - n.min {
			s, err := b.build(sub, q)
			if err != nil {
				return 0, err
			}
			if q, err = b.merge(k, s); err != nil {
				return 0, err
			}
		}
	}
	for range n.min {
		var err error
		if q, err = b.build(sub, q); err != nil {
			return 0, err
		}
	}
	return q, nil
}

// embed adds a copy of the trimmed DFA d followed by k: an accepting state of d without
// moves is k itself, one with moves the merged state of its copy and k.
func (b *direct) embed(d *dfa, k uint32) (uint32, error) {
	if d.start == 0 { // the empty language
		if err := b.grow(); err != nil {
			return 0, err
		}
		return b.newState(), nil
	}
	n := d.numStates()
	base := make([]uint32, n) // each state's copy (its own moves, not accepting)
	id := make([]uint32, n)   // what the other states move to
	for q := 1; q < n; q++ {
		if d.accept[q] && !d.hasOut[q] {
			id[q] = k
			continue
		}
		if err := b.grow(); err != nil {
			return 0, err
		}
		base[q] = b.newState()
		id[q] = base[q]
	}
	for q := 1; q < n; q++ {
		if d.accept[q] && d.hasOut[q] {
			var err error
			if id[q], err = b.merge(base[q], k); err != nil {
				return 0, err
			}
		}
	}
	for q := 1; q < n; q++ {
		if base[q] == 0 {
			continue
		}
		row := b.row(base[q])
		for c, r := range b.rep {
			row[c] = id[d.step(uint32(q), r)]
		}
	}
	return id[d.start], nil
}

// finish computes the moves of the merged states reachable from start and keeps the
// states so reached, numbered in the order found (dead 0, start 1), trimmed.
func (b *direct) finish(start uint32) (*dfa, error) {
	nc := b.nclass
	id := make([]uint32, len(b.accept), len(b.accept)+len(b.accept)/4)
	id[start] = 1
	order := []uint32{0, start}
	for i := 1; i < len(order); i++ {
		q := order[i]
		if b.setAt[q] >= 0 {
			if err := b.fill(q); err != nil {
				return nil, err
			}
		}
		for len(id) < len(b.accept) {
			id = append(id, 0)
		}
		for _, t := range b.row(q) {
			if t != 0 && id[t] == 0 {
				id[t] = uint32(len(order))
				order = append(order, t)
			}
		}
	}
	d := &dfa{class: b.class, nclass: nc, start: 1, next: make([]uint32, len(order)*nc),
		accept: make([]bool, len(order)), hasOut: make([]bool, len(order))}
	deadEnd := false
	for i := 1; i < len(order); i++ {
		q := order[i]
		d.accept[i] = b.accept[q]
		for c, t := range b.row(q) {
			d.next[i*nc+c] = id[t]
			if t != 0 {
				d.hasOut[i] = true
			}
		}
		deadEnd = deadEnd || !d.hasOut[i] && !d.accept[i]
	}
	if deadEnd {
		// an empty byte set or an embedded empty language: states that reach no accepting
		// one (every other state reaches its continuation, and the last one accepts)
		return trim(d.class, nc, d.next, d.accept), nil
	}
	return d, nil
}
