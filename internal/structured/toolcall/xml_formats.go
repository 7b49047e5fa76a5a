package toolcall

import "strings"

// The formats that write each argument as text between tags; a parameter's text becomes a
// JSON string, or the JSON it is when the function's schema does not say string. Arguments
// stream one parameter at a time: `{"key": value` as each closes, "}" at the end.

// xmlArgs builds the JSON arguments of parameters as they close.
type xmlArgs struct {
	fn    string
	types toolTypes
	text  strings.Builder
}

// add appends a closed parameter.
func (a *xmlArgs) add(key, value string) {
	if a.text.Len() == 0 {
		a.text.WriteString("{")
	} else {
		a.text.WriteString(", ")
	}
	a.text.WriteString(jsonKey(key) + ": " + a.types.textValue(a.fn, key, value))
}

// partial is the arguments so far; closed adds the final "}".
func (a *xmlArgs) partial(closed bool) string {
	s := a.text.String()
	if s == "" {
		s = "{"
	}
	if closed {
		s += "}"
	}
	return s
}

// qwen3Coder reads Qwen3-Coder's <tool_call><function=NAME><parameter=KEY>\nVALUE\n</parameter>
// ...</function></tool_call> (also Qwen3.5, Nemotron 3, Step 3.5).
func qwen3Coder() *format { return functionTags("<tool_call>", "</tool_call>") }

// seedOSS reads Seed-OSS's calls: Qwen3-Coder's inside <seed:tool_call></seed:tool_call>.
func seedOSS() *format { return functionTags("<seed:tool_call>", "</seed:tool_call>") }

// functionTags reads <function=NAME><parameter=KEY>VALUE</parameter>...</function> calls
// between open and closing; a newline each side of a value is the layout's, not the value's.
func functionTags(open, closing string) *format {
	const (
		fnOpen, fnClose = "<function=", "</function>"
		pOpen, pClose   = "<parameter=", "</parameter>"
	)
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		j, st := expect(s, len(open), fnOpen)
		if st != scanDone {
			return region{reject: st == scanBad || final}
		}
		name, j, st := readName(s, j, ">")
		if st != scanDone {
			return region{reject: st == scanBad || final}
		}
		args := xmlArgs{fn: name, types: rd.tools}
		r := region{calls: []partialCall{{name: name}}}
		for {
			if k, st := expect(s, j, pOpen); st == scanDone {
				key, k, st := until(s, k, ">")
				if st != scanDone {
					break
				}
				value, k, st := until(s, k, pClose)
				if st != scanDone {
					break
				}
				value = strings.TrimPrefix(value, "\n")
				args.add(strings.TrimSpace(key), strings.TrimSuffix(value, "\n"))
				j = k
				continue
			}
			k, st := expect(s, j, fnClose)
			if _, pst := expect(s, j, pOpen); st == scanMore || pst == scanMore {
				break
			}
			if st == scanDone {
				j = k
			}
			r.calls[0].args = args.partial(true)
			return closeWith(r, s, j, closing, final)
		}
		r.calls[0].args = args.partial(final)
		return r
	}}
}

// glm45 reads GLM-4.5/4.6/4.7's <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE
// </arg_value>...</tool_call>.
func glm45() *format {
	const (
		open, closing = "<tool_call>", "</tool_call>"
		kOpen, kClose = "<arg_key>", "</arg_key>"
		vOpen, vClose = "<arg_value>", "</arg_value>"
	)
	return &format{markers: []string{open}, read: func(s string, final bool, rd *reader) region {
		rest := s[len(open):]
		k, m := firstMarker(rest, []string{"\n", kOpen, closing})
		if k < 0 {
			name := strings.TrimSpace(rest[:len(rest)-heldPrefix(rest, []string{kOpen, closing})])
			return region{reject: !validName(name) || final}
		}
		name := strings.TrimSpace(rest[:k])
		if !validName(name) || name == "" {
			return region{reject: true}
		}
		j := len(open) + k // the name's line ends there; a tag that ends it is read next
		if m == "\n" {
			j++
		}
		args := xmlArgs{fn: name, types: rd.tools}
		r := region{calls: []partialCall{{name: name}}}
		for {
			if k, st := expect(s, j, kOpen); st == scanDone {
				key, k, st := until(s, k, kClose)
				if st != scanDone {
					break
				}
				if k, st = expect(s, k, vOpen); st != scanDone {
					break
				}
				value, k, st := until(s, k, vClose)
				if st != scanDone {
					break
				}
				args.add(strings.TrimSpace(key), value)
				j = k
				continue
			}
			k, st := expect(s, j, closing)
			if _, kst := expect(s, j, kOpen); st == scanMore || kst == scanMore {
				break
			}
			r.calls[0].args = args.partial(true)
			if st == scanDone {
				j = k
			}
			r.done, r.end = true, j
			return r
		}
		r.calls[0].args = args.partial(final)
		return r
	}}
}
