package toolcall

import (
	"encoding/json"
	"slices"
	"strings"
)

// scan is how far a piece of syntax goes in the text at hand.
type scan int

const (
	// scanDone: the piece is complete.
	scanDone scan = iota
	// scanMore: the text ends inside the piece.
	scanMore
	// scanBad: the text is not that piece.
	scanBad
)

// skipSpace returns the first index at or after i that is not JSON whitespace.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// valueEnd scans the JSON value that starts at s[i]: the end of a complete value (checked
// with encoding/json), or scanMore when s ends inside it. Brackets and strings are followed
// as far as s goes, so a value is known bad once it is complete or its brackets mismatch;
// the end of a bad value is where it was found bad.
func (rd *reader) valueEnd(s string, i int) (int, scan) {
	if i >= len(s) {
		return i, scanMore
	}
	j, st := i, scanMore
	switch c := s[i]; {
	case c == '"':
		j, st = stringEnd(s, i)
	case c == '{' || c == '[':
		j, st = rd.containerEnd(s, i)
	case c == '-' || c >= '0' && c <= '9' || c == 't' || c == 'f' || c == 'n':
		for j < len(s) && strings.IndexByte("+-.0123456789eEtruefalsn", s[j]) >= 0 {
			j++
		}
		if j < len(s) {
			st = scanDone
		}
	default:
		return i, scanBad
	}
	if st == scanDone && !json.Valid([]byte(s[i:j])) {
		return j, scanBad
	}
	return j, st
}

// stringEnd scans the JSON string that starts at s[i] ('"'); a bad one ends at the line
// break that makes it bad.
func stringEnd(s string, i int) (int, scan) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1, scanDone
		case '\n':
			return j, scanBad
		}
	}
	return len(s), scanMore
}

// reader reads one region as its text grows: it knows the request's parameter types, and
// remembers how far it scanned each JSON container, so that a region read again after more
// text came scans only the new text of the value it is in (without it a long call's
// arguments would be scanned again for every piece).
type reader struct {
	tools toolTypes
	scans map[int]containerScan // by the container's start in the region's text
}

// containerScan is a container scanned up to next, with the brackets open there (inside
// a string, next is the string's start).
type containerScan struct {
	next int
	open []byte
}

// forget drops what was scanned: a new region starts.
func (rd *reader) forget() { clear(rd.scans) }

// containerEnd scans the JSON object or array that starts at s[i], following nesting and
// strings (json.Valid checks the rest once it is complete), resuming where an earlier call
// on a shorter text of the same region stopped.
func (rd *reader) containerEnd(s string, i int) (int, scan) {
	var open []byte
	from := i
	if c, ok := rd.scans[i]; ok && c.next <= len(s) {
		from, open = c.next, slices.Clone(c.open)
	}
	for j := from; j < len(s); j++ {
		switch c := s[j]; c {
		case '"':
			end, st := stringEnd(s, j)
			if st == scanMore {
				rd.remember(i, j, open)
			}
			if st != scanDone {
				return end, st
			}
			j = end - 1
		case '{', '[':
			open = append(open, c)
		case '}', ']':
			if want := map[byte]byte{'}': '{', ']': '['}[c]; len(open) == 0 || open[len(open)-1] != want {
				return j, scanBad
			}
			open = open[:len(open)-1]
			if len(open) == 0 {
				return j + 1, scanDone
			}
		}
	}
	rd.remember(i, len(s), open)
	return len(s), scanMore
}

// remember notes that the container at i is scanned up to next with open brackets open.
func (rd *reader) remember(i, next int, open []byte) {
	if rd.scans == nil {
		rd.scans = map[int]containerScan{}
	}
	rd.scans[i] = containerScan{next: next, open: slices.Clone(open)}
}

// member is one member of a JSON object as far as the text goes.
type member struct {
	key      string
	raw      string // the value's text so far
	complete bool
}

// readObject reads the members of the JSON object that starts at s[i] ('{'): those
// complete, then the one the text ends in (its value partial), and where the object ends.
func (rd *reader) readObject(s string, i int) ([]member, int, scan) {
	var ms []member
	j := i + 1
	for {
		j = skipSpace(s, j)
		if j >= len(s) {
			return ms, j, scanMore
		}
		if s[j] == '}' {
			return ms, j + 1, scanDone
		}
		if len(ms) > 0 {
			if s[j] != ',' {
				return ms, j, scanBad
			}
			if j = skipSpace(s, j+1); j >= len(s) {
				return ms, j, scanMore
			}
		}
		if s[j] != '"' {
			return ms, j, scanBad
		}
		kend, st := stringEnd(s, j)
		if st != scanDone {
			return ms, j, st
		}
		var key string
		if json.Unmarshal([]byte(s[j:kend]), &key) != nil {
			return ms, j, scanBad
		}
		if j = skipSpace(s, kend); j >= len(s) {
			return ms, j, scanMore
		}
		if s[j] != ':' {
			return ms, j, scanBad
		}
		if j = skipSpace(s, j+1); j >= len(s) {
			return append(ms, member{key: key}), j, scanMore
		}
		vend, st := rd.valueEnd(s, j)
		switch st {
		case scanBad:
			// The value as far as it went: what a shorter text streamed of it.
			return append(ms, member{key: key, raw: s[j:vend]}), vend, scanBad
		case scanMore:
			return append(ms, member{key: key, raw: s[j:]}), len(s), scanMore
		}
		ms = append(ms, member{key: key, raw: s[j:vend], complete: true})
		j = vend
	}
}

// Call objects name the function under "name" ("tool_name" for Command-R) and its
// arguments under "arguments" ("parameters" for Llama and Command-R). An "id" member is
// ignored: it may follow the name, and the call's id is handed out when the name is.
var (
	nameKeys = []string{"name", "tool_name"}
	argKeys  = []string{"arguments", "parameters"}
)

// objectCall reads a call object's members: the call once its name is complete, its
// arguments as far as they go. bad: a name that is not a string.
func objectCall(ms []member, objectDone bool) (c partialCall, bad bool) {
	var args *member
	for k := range ms {
		m := &ms[k]
		switch {
		case slices.Contains(nameKeys, m.key) && m.complete && c.name == "":
			if json.Unmarshal([]byte(m.raw), &c.name) != nil || c.name == "" {
				return partialCall{}, true
			}
		case slices.Contains(argKeys, m.key) && args == nil:
			args = m
		}
	}
	if c.name == "" {
		return partialCall{}, false
	}
	switch {
	case args == nil && objectDone:
		c.args = "{}"
	case args == nil:
	case strings.HasPrefix(args.raw, "{") || strings.HasPrefix(args.raw, "["):
		c.args = args.raw
	case args.complete && strings.HasPrefix(args.raw, `"`):
		// Arguments written as a JSON string holding the JSON text.
		json.Unmarshal([]byte(args.raw), &c.args)
	case args.complete:
		c.args = args.raw
	}
	return c, false
}

// until finds the first of ends in s at or after i: the text before it, the end of the
// marker found, and scanDone; or, when none is there yet, the text that cannot be the start
// of one and scanMore.
func until(s string, i int, ends ...string) (text string, next int, st scan) {
	rest := s[i:]
	if k, m := firstMarker(rest, ends); k >= 0 {
		return rest[:k], i + k + len(m), scanDone
	}
	return rest[:len(rest)-heldPrefix(rest, ends)], len(s), scanMore
}

// toolTypes knows the JSON Schema type of each function's parameters.
type toolTypes map[string]map[string]string

// newToolTypes reads the parameter types of tools.
func newToolTypes(tools []Tool) toolTypes {
	tt := toolTypes{}
	for _, t := range tools {
		props, _ := t.Parameters["properties"].(map[string]any)
		types := map[string]string{}
		for name, p := range props {
			if schema, ok := p.(map[string]any); ok {
				if typ, ok := schema["type"].(string); ok {
					types[name] = typ
				}
			}
		}
		tt[t.Name] = types
	}
	return tt
}

// textValue turns a parameter value written as text into JSON: a string when the schema
// says so or the text is not JSON, else the JSON the text is.
func (tt toolTypes) textValue(fn, param, text string) string {
	if tt[fn][param] != "string" {
		if t := strings.TrimSpace(text); t != "" && json.Valid([]byte(t)) {
			return t
		}
	}
	b, _ := json.Marshal(text)
	return string(b)
}

// jsonKey returns s as a JSON string.
func jsonKey(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
