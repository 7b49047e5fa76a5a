package toolcall

import (
	"slices"
	"strings"
)

// The formats whose calls are JSON objects: {"name": ..., "arguments": {...}}, alone or in
// an array, between the family's markers.

// idKeys may come before the name in a call object (Command-R 7B's "tool_call_id").
var idKeys = []string{"id", "tool_call_id"}

// readCallObject reads the call object at s[i] ('{'). reject: it is not a call (its first
// member is not a name or id, or it ended without a name); nothing of it was a call.
func (rd *reader) readCallObject(s string, i int) (c partialCall, end int, st scan, reject bool) {
	ms, end, st := rd.readObject(s, i)
	if len(ms) > 0 && !slices.Contains(nameKeys, ms[0].key) && !slices.Contains(idKeys, ms[0].key) {
		return partialCall{}, end, st, true
	}
	c, bad := objectCall(ms, st == scanDone)
	if bad || st == scanDone && c.name == "" || st == scanBad && c.name == "" {
		return partialCall{}, end, st, true
	}
	return c, end, st, false
}

// readCallArray reads the array of call objects at s[i] ('['): the calls so far and where
// the array ends. reject: the first element is not a call object.
func (rd *reader) readCallArray(s string, i int) (calls []partialCall, end int, st scan, reject bool) {
	j := i + 1
	for {
		j = skipSpace(s, j)
		if j >= len(s) {
			return calls, j, scanMore, false
		}
		if s[j] == ']' {
			return calls, j + 1, scanDone, len(calls) == 0
		}
		if len(calls) > 0 {
			if s[j] != ',' {
				return calls, j, scanBad, false
			}
			if j = skipSpace(s, j+1); j >= len(s) {
				return calls, j, scanMore, false
			}
		}
		if s[j] != '{' {
			return calls, j, scanBad, len(calls) == 0
		}
		c, end, st, rej := rd.readCallObject(s, j)
		if rej {
			return calls, j, scanBad, len(calls) == 0
		}
		calls = append(calls, c)
		if st != scanDone {
			return calls, end, st, false
		}
		j = end
	}
}

// closeWith finishes a region whose calls end at end: done at the closing marker after
// optional whitespace, waiting while the text may still be its start, else done at end (what
// follows is content).
func closeWith(r region, s string, end int, closing string, final bool) region {
	j := skipSpace(s, end)
	switch {
	case closing != "" && strings.HasPrefix(s[j:], closing):
		r.done, r.end = true, j+len(closing)
	case closing != "" && !final && strings.HasPrefix(closing, s[j:]):
	default:
		r.done, r.end = true, end
	}
	return r
}

// hermes reads <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes 2 Pro and
// 3, Qwen2.5, Qwen3, QwQ, Granite 4 and the many templates that copied them).
func hermes() *format {
	const open, closing = "<tool_call>", "</tool_call>"
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		return rd.readJSONRegion(s, len(open), '{', "", closing, final)
	}}
}

// readJSONRegion reads a region whose marker is n bytes long, then optional whitespace and
// opening (the text of a code fence, or ""), then a call object ('{') or an array of them
// ('['), then closing.
func (rd *reader) readJSONRegion(s string, n int, shape byte, opening, closing string, final bool) region {
	i := skipSpace(s, n)
	if opening != "" {
		switch {
		case strings.HasPrefix(s[i:], opening):
			i = skipSpace(s, i+len(opening))
		case strings.HasPrefix(opening, s[i:]) && !final:
			return region{}
		default:
			return region{reject: true}
		}
	}
	if i >= len(s) {
		return region{reject: final}
	}
	if s[i] != shape {
		return region{reject: true}
	}
	var calls []partialCall
	var end int
	var st scan
	var reject bool
	if shape == '{' {
		var c partialCall
		c, end, st, reject = rd.readCallObject(s, i)
		calls = []partialCall{c}
	} else {
		calls, end, st, reject = rd.readCallArray(s, i)
	}
	r := region{calls: calls}
	switch {
	case reject:
		return region{reject: true}
	case st == scanMore:
		return r
	case st == scanBad:
		// A call begun and then broken: it keeps what it had, up to the closing marker.
		if k := strings.Index(s[end:], closing); closing != "" && k >= 0 {
			r.done, r.end = true, end+k+len(closing)
		}
		return r
	}
	return closeWith(r, s, end, closing, final)
}

// llama3JSON reads Llama 3.1/3.2/3.3's calls: {"name": ..., "parameters": {...}} as the
// whole reply, or after <|python_tag|>, several separated by ";".
func llama3JSON() *format {
	const tag = "<|python_tag|>"
	return &format{markers: []string{tag}, atStart: true, read: func(s string, final bool, rd *reader) region {
		i := 0
		if strings.HasPrefix(s, tag) {
			i = len(tag)
		}
		var r region
		for {
			i = skipSpace(s, i)
			if i >= len(s) {
				if len(r.calls) == 0 {
					r.reject = final
				}
				return r
			}
			if s[i] != '{' {
				return region{reject: len(r.calls) == 0, done: true, end: i}
			}
			c, end, st, reject := rd.readCallObject(s, i)
			switch {
			case reject && len(r.calls) == 0:
				return region{reject: true}
			case reject:
				r.done, r.end = true, i
				return r
			}
			r.calls = append(r.calls, c)
			if st != scanDone {
				return r
			}
			j := skipSpace(s, end)
			switch {
			case j >= len(s) && !final:
				return r
			case j < len(s) && s[j] == ';':
				k := skipSpace(s, j+1)
				if k >= len(s) && !final {
					return r
				}
				if k < len(s) && s[k] == '{' {
					i = k
					continue
				}
			}
			r.done, r.end = true, end
			return r
		}
	}}
}

// granite reads Granite 3's <|tool_call|>[{"name": ..., "arguments": {...}}, ...].
func granite() *format {
	const open = "<|tool_call|>"
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		return rd.readJSONRegion(s, len(open), '[', "", "", final)
	}}
}

// apriel reads Apriel's <tool_calls>[{"name": ..., "arguments": {...}}, ...]</tool_calls>.
func apriel() *format {
	const open, closing = "<tool_calls>", "</tool_calls>"
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		return rd.readJSONRegion(s, len(open), '[', "", closing, final)
	}}
}

// commandR reads Command-R's "Action: ```json [{"tool_name": ..., "parameters": {...}}]```"
// and Command R7B's <|START_ACTION|>[...]<|END_ACTION|> (command_r7b reads R7B's replies
// whole: its thinking and response markers too).
func commandR() *format {
	const action, start = "Action:", "<|START_ACTION|>"
	return &format{markers: []string{action, start}, read: func(s string, final bool, rd *reader) region {
		if strings.HasPrefix(s, start) {
			return rd.readJSONRegion(s, len(start), '[', "", "<|END_ACTION|>", final)
		}
		return rd.readJSONRegion(s, len(action), '[', "```json", "```", final)
	}}
}

// commandR7B reads Command R7B's replies: <|START_THINKING|>plan<|END_THINKING|> is
// reasoning, <|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}},
// ...]<|END_ACTION|> calls (the model's tool_call_id counts the conversation's calls, and
// the template numbers them again, so calls get ids of their own), and
// <|START_RESPONSE|>text<|END_RESPONSE|> content, the markers dropped.
func commandR7B() *format {
	const (
		action, actionEnd = "<|START_ACTION|>", "<|END_ACTION|>"
		think, thinkEnd   = "<|START_THINKING|>", "<|END_THINKING|>"
		answer, answerEnd = "<|START_RESPONSE|>", "<|END_RESPONSE|>"
	)
	return &format{markers: []string{action, think, answer}, read: func(s string, final bool, rd *reader) region {
		switch {
		case strings.HasPrefix(s, think):
			return region{done: true, end: len(think), pass: &passage{kind: Reasoning, ends: []string{thinkEnd}}}
		case strings.HasPrefix(s, answer):
			return region{done: true, end: len(answer), pass: &passage{kind: Content, ends: []string{answerEnd}}}
		}
		return rd.readJSONRegion(s, len(action), '[', "", actionEnd, final)
	}}
}
