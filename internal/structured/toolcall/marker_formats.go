package toolcall

import "strings"

// The formats that mark each part of a call with tokens of their own: a name between
// markers, then arguments as one JSON value.

// validName reports whether s can be a function's name (letters, digits, _ - . :), so that
// prose after a marker is told from a call.
func validName(s string) bool {
	for _, c := range s {
		ok := c == '_' || c == '-' || c == '.' || c == ':' || c >= '0' && c <= '9' ||
			c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

// readName reads a name at s[i] that ends at one of ends: the name, where the text goes on
// after the marker, and how far it got. A name that cannot be one is scanBad.
func readName(s string, i int, ends ...string) (name string, next int, st scan) {
	name, next, st = until(s, i, ends...)
	name = strings.TrimSpace(name)
	if !validName(name) || st == scanDone && name == "" {
		return "", i, scanBad
	}
	return name, next, st
}

// readArgs reads the JSON value at s[i] (after optional whitespace): the arguments as far as
// they go, where they end and how far they got. Arguments found bad once streamed are kept
// as the model wrote them, up to where they were found bad, so that a longer text never
// takes back what a shorter one handed out.
func (rd *reader) readArgs(s string, i int) (args string, end int, st scan) {
	i = skipSpace(s, i)
	if i >= len(s) {
		return "", i, scanMore
	}
	end, st = rd.valueEnd(s, i)
	if st == scanMore {
		return s[i:], len(s), st
	}
	return s[i:end], end, st
}

// expect checks for lit at s[i] after optional whitespace: scanDone with the index after it,
// scanMore while s may still become it, else scanBad.
func expect(s string, i int, lit string) (int, scan) {
	i = skipSpace(s, i)
	switch {
	case strings.HasPrefix(s[i:], lit):
		return i + len(lit), scanDone
	case strings.HasPrefix(lit, s[i:]):
		return i, scanMore
	}
	return i, scanBad
}

// mistral reads [TOOL_CALLS] followed by a JSON array of call objects (Mistral 7B v0.3,
// Nemo), or by name[ARGS]{...} with an optional [CALL_ID]id before [ARGS] (Mistral Small
// 3.2, Devstral, Ministral 3), one [TOOL_CALLS] per call.
func mistral() *format {
	const open, args, callID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
	return &format{markers: []string{open}, newID: mistralID, read: func(s string, final bool, rd *reader) region {
		i := skipSpace(s, len(open))
		if i >= len(s) {
			return region{reject: final}
		}
		if s[i] == '[' {
			return rd.readJSONRegion(s, len(open), '[', "", "", final)
		}
		name, j, st := readName(s, i, args, callID)
		if st != scanDone {
			return region{reject: st == scanBad || final}
		}
		var c partialCall
		c.name = name
		if strings.HasPrefix(s[j-len(callID):j], callID) && j-len(callID) >= i {
			id, k, st := until(s, j, args)
			if st != scanDone {
				return region{reject: final}
			}
			c.id, j = strings.TrimSpace(id), k
		}
		c.args, j, st = rd.readArgs(s, j)
		r := region{calls: []partialCall{c}}
		if st != scanMore {
			r.done, r.end = true, j
		}
		return r
	}}
}

// deepseekV3 reads DeepSeek's <｜tool▁calls▁begin｜> section: calls
// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜> (V3, R1)
// or <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3.1), then
// <｜tool▁calls▁end｜>.
func deepseekV3() *format {
	const (
		open, closing     = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
		callOpen, callEnd = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
		sep, fence        = "<｜tool▁sep｜>", "```json"
	)
	call := func(s string, j int, rd *reader) (c partialCall, begun bool, next int, st scan) {
		first, j, st := until(s, j, sep)
		if st != scanDone {
			return c, false, j, scanMore
		}
		if k := skipSpace(s, j); k < len(s) && (s[k] == '{' || s[k] == '[') {
			c.name = strings.TrimSpace(first) // V3.1: the name, then the arguments
		} else if k >= len(s) {
			return c, false, j, scanMore
		} else {
			// V3, R1: the type, then the name on its line and the arguments in a fence.
			if c.name, j, st = readName(s, j, "\n"); st != scanDone {
				return c, false, j, st
			}
			if k, st := expect(s, j, fence); st == scanDone {
				j = k
			} else if st == scanMore {
				return c, true, j, scanMore
			}
		}
		if c.args, j, st = rd.readArgs(s, j); st != scanDone {
			return c, true, j, st
		}
		_, j, st = until(s, j, callEnd) // the fence's close and the call's end
		return c, true, j, st
	}
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		return readSection(s, final, rd, open, closing, callOpen, call)
	}}
}

// sectionCall reads one call of a section at s[j], after its opening marker: the call, whether
// it has begun (its name is known), where it ends and how far it got. A call begun and then
// bad ends the section where it went bad.
type sectionCall func(s string, j int, rd *reader) (c partialCall, begun bool, next int, st scan)

// readSection reads a section of calls: the open marker, calls each opened by callOpen and
// read by call, then closing. What stands where a call or the close should is content.
func readSection(s string, final bool, rd *reader, open, closing, callOpen string, call sectionCall) region {
	var r region
	i := len(open)
	for {
		if j, st := expect(s, i, closing); st != scanBad {
			if st == scanDone {
				r.done, r.end = true, j
			}
			return withReject(r, st == scanMore && final)
		}
		j, st := expect(s, i, callOpen)
		if st != scanDone {
			if st == scanBad {
				r.done, r.end = true, i
			}
			return withReject(r, st == scanBad || final)
		}
		c, begun, next, st := call(s, j, rd)
		if !begun {
			return withReject(r, st == scanBad || final)
		}
		r.calls = append(r.calls, c)
		switch st {
		case scanMore:
			return r
		case scanBad:
			r.done, r.end = true, next
			return r
		}
		i = next
	}
}

// withReject marks r rejected when reject holds and it has no call: a region that began a
// call keeps it.
func withReject(r region, reject bool) region {
	if reject && len(r.calls) == 0 {
		r.reject = true
	}
	return r
}

// kimiK2 reads Kimi-K2's <|tool_calls_section_begin|> section: calls
// <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>,
// whose "functions.NAME:IDX" is also the call's id, then <|tool_calls_section_end|>.
func kimiK2() *format {
	const (
		open, closing     = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
		callOpen, callEnd = "<|tool_call_begin|>", "<|tool_call_end|>"
		argOpen           = "<|tool_call_argument_begin|>"
	)
	call := func(s string, j int, rd *reader) (c partialCall, begun bool, next int, st scan) {
		id, j, st := readName(s, j, argOpen)
		if st != scanDone {
			return c, false, j, st
		}
		c.id, c.name = id, strings.TrimPrefix(id, "functions.")
		if k := strings.LastIndexByte(c.name, ':'); k > 0 {
			c.name = c.name[:k]
		}
		if c.args, j, st = rd.readArgs(s, j); st != scanDone {
			return c, true, j, st
		}
		j, st = expect(s, j, callEnd)
		return c, true, j, st
	}
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		return readSection(s, final, rd, open, closing, callOpen, call)
	}}
}

// functionaryV31 reads functionary v3.1's <function=NAME>{...}</function>.
func functionaryV31() *format {
	const open, closing = "<function=", "</function>"
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		name, j, st := readName(s, len(open), ">")
		if st != scanDone {
			return region{reject: st == scanBad || final}
		}
		c := partialCall{name: name}
		c.args, j, st = rd.readArgs(s, j)
		r := region{calls: []partialCall{c}}
		switch st {
		case scanMore:
			return r
		case scanBad:
			r.done, r.end = true, j
			return r
		}
		return closeWith(r, s, j, closing, final)
	}}
}

// functionaryV32 reads functionary v3.2's messages: >>>NAME\n{...} is a call, >>>all\n the
// text that follows up to the next >>>. The generation prompt ends with >>>, so the reply
// starts with a recipient.
func functionaryV32() *format {
	const open = ">>>"
	return &format{markers: []string{open}, atStart: true, read: func(s string, final bool, rd *reader) region {
		i := 0
		if strings.HasPrefix(s, open) {
			i = len(open)
		}
		name, j, st := readName(s, i, "\n")
		if st != scanDone {
			return region{reject: st == scanBad || final}
		}
		if name == "all" {
			return region{done: true, end: j, pass: &passage{kind: Content, ends: []string{open}, keep: open}}
		}
		c := partialCall{name: name}
		c.args, j, st = rd.readArgs(s, j)
		r := region{calls: []partialCall{c}}
		if st != scanMore {
			r.done, r.end = true, j
		}
		return r
	}}
}
