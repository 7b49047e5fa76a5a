package structured

// The parser is Earley's algorithm over bytes, with terminals that span many bytes: an item
// whose next symbol is a terminal carries the state of that terminal's DFA. Scanning a byte
// moves every such item's DFA; an item whose DFA reaches an accepting state also completes
// the terminal (the lexeme may end here or go on: both are kept, so lexeme boundaries are
// as nondeterministic as the grammar says and no longest-match rule is imposed). Nullable
// rules are handled as Aycock and Horspool do: predicting a nullable rule also steps over it.
//
// The chart is a stack of item sets, one per byte of input; sets are never changed once
// built, so a matcher can roll bytes back by popping sets and be cloned by copying the
// stack's slice of sets.

// item is an Earley item: a dotted position (rule, alternative, dot), the set where the
// rule began, and the DFA state of the terminal after the dot (0 when the next symbol is
// not a terminal).
type item struct {
	pos    int32
	origin int32
	lex    uint32
}

// enter returns the item for position pos begun at origin, with the DFA of its next
// terminal (if any) at its start.
func (c *Compiled) enter(pos, origin int32) item {
	it := item{pos: pos, origin: origin}
	if !c.posEnd[pos] {
		if s := c.posNext[pos]; s.isTerm() {
			it.lex = c.terms[s.terminal()].start
		}
	}
	return it
}

// addItem appends it to set unless it is there already.
func addItem(set []item, it item) []item {
	for _, x := range set {
		if x == it {
			return set
		}
	}
	return append(set, it)
}

// closure completes set (the items of position k, seeded by scanning) with predictions and
// completions; sets holds positions 0..k-1.
func (c *Compiled) closure(sets [][]item, set []item, k int32) []item {
	for i := 0; i < len(set); i++ {
		it := set[i]
		if c.posEnd[it.pos] {
			a := sym(c.posRule[it.pos])
			waiters := set
			if it.origin < k {
				waiters = sets[it.origin]
			}
			for j := 0; j < len(waiters); j++ {
				w := waiters[j]
				if !c.posEnd[w.pos] && c.posNext[w.pos] == a {
					set = addItem(set, c.enter(w.pos+1, w.origin))
					if it.origin == k {
						waiters = set
					}
				}
			}
			continue
		}
		next := c.posNext[it.pos]
		if next.isTerm() {
			d := c.terms[next.terminal()]
			if it.lex == d.start && d.accept[d.start] {
				set = addItem(set, c.enter(it.pos+1, it.origin))
			}
			continue
		}
		for _, p := range c.ruleAlts[next] {
			set = addItem(set, c.enter(p, k))
		}
		if c.nullable[next] {
			set = addItem(set, c.enter(it.pos+1, it.origin))
		}
	}
	return set
}

// initial returns the item set before any input.
func (c *Compiled) initial() []item {
	var set []item
	for _, p := range c.ruleAlts[c.start] {
		set = addItem(set, c.enter(p, 0))
	}
	return c.closure(nil, set, 0)
}

// scan returns the item set after byte b follows sets (nil when b is not allowed), built
// in buf's storage.
func (c *Compiled) scan(sets [][]item, b byte, buf []item) []item {
	k := int32(len(sets))
	set := buf[:0]
	for _, it := range sets[k-1] {
		if it.lex == 0 {
			continue
		}
		d := c.terms[c.posNext[it.pos].terminal()]
		q := d.step(it.lex, b)
		if q == 0 {
			continue
		}
		set = addItem(set, item{pos: it.pos, origin: it.origin, lex: q})
		if d.accept[q] {
			set = addItem(set, c.enter(it.pos+1, it.origin))
		}
	}
	if len(set) == 0 {
		return nil
	}
	return c.closure(sets, set, k)
}

// accepting reports whether set holds the completed start rule begun at 0.
func (c *Compiled) accepting(set []item) bool {
	for _, it := range set {
		if it.origin == 0 && c.posEnd[it.pos] && c.posRule[it.pos] == int32(c.start) {
			return true
		}
	}
	return false
}

// canContinue reports whether some byte may follow set.
func (c *Compiled) canContinue(set []item) bool {
	for _, it := range set {
		if it.lex != 0 && c.terms[c.posNext[it.pos].terminal()].hasOut[it.lex] {
			return true
		}
	}
	return false
}

// Matcher checks input against a compiled grammar byte by byte. It is the reference the
// token masks are tested against, and the state a Masker keeps.
type Matcher struct {
	c     *Compiled
	sets  [][]item
	input []byte // the bytes accepted
}

// NewMatcher returns a matcher at the start of the input.
func (c *Compiled) NewMatcher() *Matcher {
	return &Matcher{c: c, sets: [][]item{c.initial()}}
}

// Matches reports whether s is in the language.
func (c *Compiled) Matches(s string) bool {
	m := c.NewMatcher()
	return m.AcceptString(s) && m.Accepting()
}

// AcceptByte feeds b; it reports false, leaving the matcher unchanged, when b cannot
// continue a string of the language.
func (m *Matcher) AcceptByte(b byte) bool {
	set := m.c.scan(m.sets, b, nil)
	if set == nil {
		return false
	}
	m.sets = append(m.sets, set)
	m.input = append(m.input, b)
	return true
}

// AcceptString feeds the bytes of s in order; it reports false at the first byte that
// cannot continue (the bytes before it stay accepted).
func (m *Matcher) AcceptString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !m.AcceptByte(s[i]) {
			return false
		}
	}
	return true
}

// Accepting reports whether the input so far is a complete string of the language.
func (m *Matcher) Accepting() bool { return m.c.accepting(m.sets[len(m.sets)-1]) }

// CanContinue reports whether some byte may follow the input so far.
func (m *Matcher) CanContinue() bool { return m.c.canContinue(m.sets[len(m.sets)-1]) }

// Len returns the number of bytes accepted.
func (m *Matcher) Len() int { return len(m.sets) - 1 }

// Rollback forgets the last n accepted bytes (n at most Len).
func (m *Matcher) Rollback(n int) {
	m.sets = m.sets[:len(m.sets)-n]
	m.input = m.input[:len(m.input)-n]
}

// Clone returns an independent matcher in the same state.
func (m *Matcher) Clone() *Matcher {
	return &Matcher{c: m.c, sets: append([][]item(nil), m.sets...), input: append([]byte(nil), m.input...)}
}

// nextBytes returns the set of bytes that may follow set.
func (c *Compiled) nextBytes(set []item) byteSet {
	var out byteSet
	for _, it := range set {
		if it.lex == 0 {
			continue
		}
		d := c.terms[c.posNext[it.pos].terminal()]
		row := d.next[int(it.lex)*d.nclass : int(it.lex+1)*d.nclass]
		for b := range 256 {
			if row[d.class[b]] != 0 {
				out.add(byte(b))
			}
		}
	}
	return out
}

// Forced returns the bytes the grammar forces from the current state, at most max: while
// the input is not complete and exactly one byte may follow, that byte is forced. The
// matcher is not changed. This is jump-forward: a caller may append the bytes' tokens
// without sampling.
func (m *Matcher) Forced(max int) []byte {
	var out []byte
	sets := m.sets
	for len(out) < max {
		last := sets[len(sets)-1]
		if m.c.accepting(last) {
			break
		}
		next := m.c.nextBytes(last)
		only, count := byte(0), 0
		for b := range 256 {
			if next.has(byte(b)) {
				only = byte(b)
				count++
			}
		}
		if count != 1 {
			break
		}
		set := m.c.scan(sets, only, nil)
		if len(out) == 0 {
			sets = append([][]item(nil), sets...)
		}
		sets = append(sets, set)
		out = append(out, only)
	}
	return out
}
