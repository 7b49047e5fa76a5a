package sample

import "strings"

// naiveStopMatcher is the matcher kvasir had before the automaton: at every piece it
// searches the held-back text and the piece for every stop string, then holds back the
// longest suffix that is a proper prefix of one. Its cost grows with the number of stop
// strings; it is kept as the oracle the automaton is checked against.
type naiveStopMatcher struct {
	stops       []string
	includeStop bool
	held        string
	done        bool
}

func newNaiveStopMatcher(stops []string, includeStop bool) *naiveStopMatcher {
	m := &naiveStopMatcher{includeStop: includeStop}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

func (m *naiveStopMatcher) Add(piece string) (emit string, stop string, ok bool) {
	if m.done {
		return "", "", false
	}
	if len(m.stops) == 0 {
		return piece, "", false
	}
	text := m.held + piece
	best, bestAt, bestEnd := -1, 0, len(text)+1
	for i, s := range m.stops {
		at := strings.Index(text, s)
		if at < 0 {
			continue
		}
		if end := at + len(s); end < bestEnd || (end == bestEnd && at < bestAt) {
			best, bestAt, bestEnd = i, at, end
		}
	}
	if best >= 0 {
		m.done, m.held = true, ""
		end := bestAt
		if m.includeStop {
			end += len(m.stops[best])
		}
		return text[:end], m.stops[best], true
	}
	hold := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(text)); n > hold; n-- {
			if strings.HasSuffix(text, s[:n]) {
				hold = n
				break
			}
		}
	}
	m.held = text[len(text)-hold:]
	return text[:len(text)-hold], "", false
}

func (m *naiveStopMatcher) Flush() string {
	out := m.held
	m.held = ""
	return out
}
