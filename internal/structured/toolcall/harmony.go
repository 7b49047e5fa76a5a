package toolcall

import "strings"

// harmony reads gpt-oss's harmony messages. The generation prompt ends with
// "<|start|>assistant", so the reply starts inside a message's header; each message is a
// header (its channel, and "to=functions.NAME" for a call), <|message|>, and a body that
// ends at <|end|>, <|call|>, <|return|> or the next <|start|>. A call's body is its
// arguments, the analysis channel's is reasoning, any other's is content.
func harmony() *format {
	const (
		start, message = "<|start|>", "<|message|>"
		channel        = "<|channel|>"
		maxHeader      = 256 // a header longer than this, or with a line break, is prose
	)
	ends := []string{"<|end|>", "<|call|>", "<|return|>", start}
	return &format{markers: []string{start, channel}, atStart: true, read: func(s string, final bool, rd *reader) region {
		i := 0
		if strings.HasPrefix(s, start) {
			i = len(start)
		}
		header, j, st := until(s, i, message)
		if strings.Contains(header, "\n") || len(header) > maxHeader {
			return region{reject: true}
		}
		if st != scanDone {
			return region{reject: final}
		}
		recipient, ch := harmonyHeader(header)
		if name, ok := strings.CutPrefix(recipient, "functions."); ok {
			rest := s[j:]
			k, m := firstMarker(rest, ends)
			r := region{calls: []partialCall{{name: name, args: rest[:len(rest)-heldPrefix(rest, ends)]}}}
			if k >= 0 {
				r.calls[0].args, r.done, r.end = rest[:k], true, j+k
				if m != start {
					r.end += len(m)
				}
			}
			return r
		}
		kind := Content
		if ch == "analysis" {
			kind = Reasoning
		}
		return region{done: true, end: j, pass: &passage{kind: kind, ends: ends, keep: start}}
	}}
}

// harmonyHeader reads a header's recipient ("to=...") and channel ("<|channel|>NAME").
func harmonyHeader(h string) (recipient, ch string) {
	word := func(s string) string {
		if k := strings.IndexAny(s, " <"); k >= 0 {
			return s[:k]
		}
		return s
	}
	if k := strings.Index(h, "to="); k >= 0 {
		recipient = word(h[k+len("to="):])
	}
	if k := strings.Index(h, "<|channel|>"); k >= 0 {
		ch = word(h[k+len("<|channel|>"):])
	}
	return recipient, ch
}
