package sample

import "strings"

// StopMatcher finds stop strings in streamed text that arrives in arbitrary pieces (one per
// token), so a stop string may span token boundaries. Text that could be the start of a stop
// string is held back until it is known not to be one; when a stop string completes, the text
// before it (and the stop string itself when IncludeStop is set) is released and the matcher
// is done.
type StopMatcher struct {
	stops       []string
	includeStop bool
	held        string
	done        bool
}

// NewStopMatcher returns a matcher for stops (empty strings are ignored).
func NewStopMatcher(stops []string, includeStop bool) *StopMatcher {
	m := &StopMatcher{includeStop: includeStop}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Add feeds the next piece of text. It returns the text that is safe to emit now and, when
// a stop string completed, the stop string that matched (ok true). After a match, Add
// returns nothing.
func (m *StopMatcher) Add(piece string) (emit string, stop string, ok bool) {
	if m.done {
		return "", "", false
	}
	if len(m.stops) == 0 {
		return piece, "", false
	}
	text := m.held + piece
	// The stop string that completes first wins, as if the text came byte by byte (the
	// earlier start, then the lower index, on equal ends): the result does not depend on
	// how the text was split into pieces.
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
	// Hold back the longest suffix that is a proper prefix of some stop string.
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

// Flush returns the held-back text at the end of the stream (no stop string matched).
func (m *StopMatcher) Flush() string {
	out := m.held
	m.held = ""
	return out
}

// Held returns the number of bytes held back.
func (m *StopMatcher) Held() int { return len(m.held) }
