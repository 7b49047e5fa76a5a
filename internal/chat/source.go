package chat

import (
	"regexp"
	"strings"
)

// toJSONFilter is the name the template's `tojson` filter is renamed to, so that Python's
// json.dumps behaviour (pyToJSON) replaces the engine's built-in filter, which sorts keys and
// escapes HTML characters when an indent is given.
const toJSONFilter = "kvasir_tojson"

// The calls prepareSource inserts to count loop iterations and macro depth, and the names of
// the callables behind them.
const (
	loopFunc       = "kvasir_loop"
	enterFunc      = "kvasir_enter"
	leaveFunc      = "kvasir_leave"
	countIteration = "{{ " + loopFunc + "() }}"
	enterMacro     = "{{ " + enterFunc + "() }}"
	leaveMacro     = "{{ " + leaveFunc + "() }}"
)

// toJSONUse matches a use of the tojson filter inside a tag: a pipe, optional spaces, the name.
var toJSONUse = regexp.MustCompile(`\|(\s*)tojson\b`)

// prepareSource adapts a template's source to the engine so that it renders as Python's
// Jinja2 does under transformers' settings:
//
//   - newlines are normalized to "\n" and one trailing newline is dropped
//     (Jinja2's newline_sequence and keep_trailing_newline=False);
//   - `| tojson` inside tags is pointed at toJSONFilter;
//   - a "\n" is inserted after a block or comment tag that is immediately followed by another
//     tag. The engine applies trim_blocks to the next text segment even when an expression
//     stands between (so `{% if x %}{{ y }}\n` would lose its newline); the inserted newline is
//     the text right after the tag, which trim_blocks removes, leaving the real text intact.
//   - likewise a " " is inserted between a tag and a following `{%-` or `{#-`, whose trimming
//     would otherwise reach back past the tag into earlier text; the trimming removes it.
//   - the limits are counted by calls the renderer supplies, inserted as expressions (which
//     print nothing, and which the engine's whitespace control passes over): one at the
//     start of every for-loop body (countIteration), one at the start and one at the end of
//     every macro body (enterMacro, leaveMacro). Nothing is inserted inside raw blocks.
func prepareSource(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")

	var b strings.Builder
	b.Grow(len(src) + len(src)/16)
	i := 0
	inRaw := false
	for i < len(src) {
		open := strings.Index(src[i:], "{")
		if open < 0 {
			b.WriteString(src[i:])
			break
		}
		start := i + open
		kind := tagKind(src, start)
		if kind == 0 {
			b.WriteString(src[i : start+1])
			i = start + 1
			continue
		}
		b.WriteString(src[i:start])
		end := tagEnd(src, start, kind)
		if end < 0 {
			// Unclosed tag: leave the rest as is, the engine reports the error.
			b.WriteString(src[start:])
			break
		}
		tag := src[start:end]
		if kind != '#' {
			tag = toJSONUse.ReplaceAllString(tag, "|${1}"+toJSONFilter)
		}
		keyword := ""
		if kind == '%' {
			keyword = stmtKeyword(tag)
		}
		switch {
		case keyword == "raw":
			inRaw = true
		case keyword == "endraw":
			inRaw = false
		case keyword == "endmacro" && !inRaw:
			b.WriteString(leaveMacro)
		}
		b.WriteString(tag)
		if !inRaw {
			switch keyword {
			case "for":
				b.WriteString(countIteration)
			case "macro":
				b.WriteString(enterMacro)
			}
		}
		i = end

		next := tagKind(src, i)
		if next == 0 {
			continue
		}
		trimsRight := strings.HasSuffix(src[:end-2], "-")
		switch {
		case (kind == '%' || kind == '#') && !trimsRight:
			b.WriteByte('\n')
		case (next == '%' || next == '#') && i+2 < len(src) && src[i+2] == '-':
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// tagKind returns '{', '%' or '#' when a tag opens at src[i], else 0.
func tagKind(src string, i int) byte {
	if i+1 >= len(src) || src[i] != '{' {
		return 0
	}
	switch c := src[i+1]; c {
	case '{', '%', '#':
		return c
	}
	return 0
}

// tagEnd returns the index just past the closer of the tag opening at start, skipping quoted
// strings in expression and block tags as the engine's scanner does, or -1 when unclosed.
func tagEnd(src string, start int, kind byte) int {
	closer := "}}"
	switch kind {
	case '%':
		closer = "%}"
	case '#':
		closer = "#}"
	}
	for i := start + 2; i < len(src); i++ {
		c := src[i]
		if kind != '#' && (c == '\'' || c == '"') {
			i++
			for i < len(src) && src[i] != c {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			continue
		}
		if strings.HasPrefix(src[i:], closer) {
			return i + 2
		}
	}
	return -1
}

// stmtKeyword returns the first word of a statement tag ("for" of "{%- for m in x %}").
func stmtKeyword(tag string) string {
	body := strings.TrimPrefix(strings.TrimPrefix(tag, "{%"), "-")
	body = strings.TrimLeft(body, " \t\n")
	end := 0
	for end < len(body) && (body[end] >= 'a' && body[end] <= 'z' || body[end] == '_') {
		end++
	}
	return body[:end]
}
