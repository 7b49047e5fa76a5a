package server

import (
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds scans of raw JSON values (valid JSON, as the values of an object that
// decoded) that allocate nothing, so that a request's lists and texts can be bounded before
// they are decoded.

// elements calls yield with each element of raw when it is a JSON array, stopping when
// yield returns false; it reports whether raw is an array.
func elements(raw []byte, yield func(elem []byte) bool) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return false
	}
	if j := skipSpace(raw, i+1); j < len(raw) && raw[j] == ']' {
		return true
	}
	// Elements are separated by the commas outside strings at depth 1.
	depth, inString, start := 0, false, i+1
	for ; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString && c == '\\':
			i++ // the escaped byte cannot end the string
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			if depth--; depth == 0 {
				yield(raw[start:i])
				return true
			}
		case c == ',' && depth == 1:
			if !yield(raw[start:i]) {
				return true
			}
			start = i + 1
		}
	}
	return false // unterminated: not valid JSON
}

// members calls yield with the raw key (quoted) and value of each member of raw when it is
// a JSON object, stopping when yield returns false; it reports whether raw is an object.
func members(raw []byte, yield func(key, value []byte) bool) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	if j := skipSpace(raw, i+1); j < len(raw) && raw[j] == '}' {
		return true
	}
	// Members are separated by the commas outside strings at depth 1; a key ends at the
	// first colon outside strings at depth 1 after the member starts.
	depth, inString, start, colon := 0, false, i+1, -1
	for ; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
		case (c == ']' || c == '}') && depth > 1:
			depth--
		case c == ':' && depth == 1 && colon < 0:
			colon = i
		case (c == ',' || c == '}') && depth == 1:
			key := raw[start:colon]
			key = key[skipSpace(key, 0):]
			for len(key) > 0 && key[len(key)-1] != '"' {
				key = key[:len(key)-1] // the whitespace before the colon
			}
			if !yield(key, raw[colon+1:i]) || c == '}' {
				return true
			}
			start, colon = i+1, -1
		}
	}
	return false
}

// listLen returns the number of elements of raw when it is a JSON array, and ok false when
// it is any other value.
func listLen(raw []byte) (n int, ok bool) {
	ok = elements(raw, func([]byte) bool { n++; return true })
	return n, ok
}

// stringLen returns the length in bytes of the text of raw when it is a JSON string (as
// encoding/json decodes it), and ok false when it is any other value.
func stringLen(raw []byte) (n int, ok bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '"' {
		return 0, false
	}
	for i++; i < len(raw) && raw[i] != '"'; {
		if raw[i] != '\\' {
			_, size := utf8.DecodeRune(raw[i:])
			n, i = n+size, i+size
			continue
		}
		if raw[i+1] != 'u' {
			n, i = n+1, i+2
			continue
		}
		r := hex4(raw[i+2:])
		i += 6
		if utf16.IsSurrogate(r) {
			if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
				if pair := utf16.DecodeRune(r, hex4(raw[i+2:])); pair != utf8.RuneError {
					n, i = n+utf8.RuneLen(pair), i+6
					continue
				}
			}
			r = utf8.RuneError // a lone surrogate becomes U+FFFD
		}
		n += utf8.RuneLen(r)
	}
	return n, true
}

// hex4 is the value of the four hex digits b starts with.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// skipSpace returns the index of the first byte of b from i on that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
