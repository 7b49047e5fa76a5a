package sample

// StopMatcher finds stop strings in streamed text that arrives in arbitrary pieces (one per
// token), so a stop string may span token boundaries. Text that could be the start of a stop
// string is held back until it is known not to be one; when a stop string completes, the text
// before it (and the stop string itself when includeStop is set) is released and the matcher
// is done.
//
// The stop string that completes first wins, as if the text came byte by byte (the earlier
// start, then the lower index, on equal ends): the result does not depend on how the text
// was split into pieces. Each piece costs time linear in its length (plus the held-back
// text, at most the longest stop string), whatever the number of stop strings: the matcher
// walks its StopSet's automaton, which all the choices of a request share.
type StopMatcher struct {
	set         *StopSet
	includeStop bool
	state       int32  // the automaton's node: it spells held
	held        string // the longest suffix of the text so far that a stop string starts with
	done        bool
}

// NewStopMatcher returns a matcher for stops (empty strings are ignored), compiling them
// into a StopSet of its own; to share one set among several matchers, use NewStopSet and
// StopSet.Matcher.
func NewStopMatcher(stops []string, includeStop bool) *StopMatcher {
	return NewStopSet(stops).Matcher(includeStop)
}

// Add feeds the next piece of text. It returns the text that is safe to emit now and, when
// a stop string completed, the stop string that matched (ok true). After a match, Add
// returns nothing.
func (m *StopMatcher) Add(piece string) (emit string, stop string, ok bool) {
	if m.done {
		return "", "", false
	}
	s := m.set
	if s == nil {
		return piece, "", false
	}
	state := m.state
	for i := 0; i < len(piece); i++ {
		state = s.step(state, piece[i])
		k := s.nodes[state].match
		if k < 0 {
			continue
		}
		// The first end at which any stop string completes; match holds the longest
		// stop string ending there, so the one starting first.
		end := len(m.held) + i + 1
		cut := end - len(s.stops[k])
		if m.includeStop {
			cut = end
		}
		emit = prefix(m.held, piece, cut)
		m.done, m.held, m.state = true, "", 0
		return emit, s.stops[k], true
	}
	// No match: the node spells the longest suffix of the text that a stop string starts
	// with (a proper prefix, as no stop string ends here). Hold it back.
	hold := int(s.depth[state])
	total := len(m.held) + len(piece)
	emit = prefix(m.held, piece, total-hold)
	if hold <= len(piece) {
		m.held = piece[len(piece)-hold:]
	} else {
		m.held = m.held[len(m.held)-(hold-len(piece)):] + piece
	}
	m.state = state
	return emit, "", false
}

// prefix returns the first n bytes of a + b without joining more than it returns.
func prefix(a, b string, n int) string {
	if n <= len(a) {
		return a[:n]
	}
	if a == "" {
		return b[:n]
	}
	return a + b[:n-len(a)]
}

// Flush returns the held-back text at the end of the stream (no stop string matched), or
// before text that is not to be matched, and starts matching afresh.
func (m *StopMatcher) Flush() string {
	out := m.held
	m.held, m.state = "", 0
	return out
}

// Held returns the number of bytes held back.
func (m *StopMatcher) Held() int { return len(m.held) }

// Set returns the StopSet the matcher walks (nil: none), which the matchers of a request's
// choices share.
func (m *StopMatcher) Set() *StopSet { return m.set }
