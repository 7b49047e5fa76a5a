package jsonschema

import (
	"slices"
)

// hexDigit matches one hexadecimal digit.
func hexDigit() class { return class{ranges: []runeRange{{'0', '9'}, {'A', 'F'}, {'a', 'f'}}} }

// digit matches one decimal digit.
func digit() class { return class{ranges: []runeRange{{'0', '9'}}} }

// charRule returns the rule for one character of a JSON string: any character but '"',
// '\' and the controls, or an escape (\uXXXX never names a lone surrogate, so each escape is
// one character).
func (c *compiler) charRule() expr {
	return c.builtin("char", func(expr) expr {
		nonSurrogate := newAlt(
			newSeq(class{ranges: []runeRange{{'0', '9'}, {'A', 'C'}, {'a', 'c'}, {'E', 'F'}, {'e', 'f'}}}, rep{e: hexDigit(), min: 3, max: 3}),
			newSeq(class{ranges: []runeRange{{'D', 'D'}, {'d', 'd'}}}, class{ranges: []runeRange{{'0', '7'}}}, rep{e: hexDigit(), min: 2, max: 2}),
		)
		body := newAlt(
			plainChar(nil),
			newSeq(lit(`\`), newAlt(class{ranges: []runeRange{{'"', '"'}, {'/', '/'}, {'\\', '\\'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}}, newSeq(lit("u"), nonSurrogate))),
		)
		return body
	})
}

// anyValue returns the rule for any JSON value.
func (c *compiler) anyValue() expr {
	return c.builtin("value", c.jsonValue)
}

// builtin returns a reference to the shared rule called name, defining it the first time
// as body(a reference to itself).
func (c *compiler) builtin(name string, body func(self expr) expr) expr {
	key := "builtin:" + name
	if m, ok := c.memo[key]; ok {
		return ref(m.name)
	}
	rule := c.newName(name)
	c.memo[key] = &memoEntry{done: true, name: rule}
	c.g.rules[rule] = body(ref(rule))
	return ref(rule)
}

// jsonValue writes any JSON value whose nested values are inner.
func (c *compiler) jsonValue(inner expr) expr { return c.container(inner) }

// stringRule returns the rule for any JSON string.
func (c *compiler) stringRule() expr {
	return c.builtin("string", func(expr) expr {
		return newSeq(lit(`"`), rep{e: c.charRule(), min: 0, max: -1}, lit(`"`))
	})
}

// compileString writes the strings an alternative admits.
func (c *compiler) compileString(f *flat) (expr, error) {
	if f.maxLen >= 0 && f.minLen > f.maxLen {
		return nil, nil
	}
	if len(f.formats) > 1 {
		return nil, schemaError(f.ptr, "more than one format (%v) on one string is not supported", f.formats)
	}
	if len(f.formats) == 1 && len(f.patterns) > 0 {
		// A pattern that only demands literal prefixes (^https?://) is written into the
		// format's grammar; other patterns beside a format are refused.
		body := formatWithPrefix(f.formats[0], f.patterns[0].v.(string))
		if body == nil || len(f.patterns) > 1 || f.minLen > 0 || f.maxLen >= 0 {
			return nil, schemaError(f.patterns[0].ptr, "pattern beside format %q is supported only when it demands a literal prefix (as ^https?://)", f.formats[0])
		}
		return newSeq(lit(`"`), body, lit(`"`)), nil
	}
	if len(f.formats) == 1 {
		body := raiseMinimum(formatExpr(f.formats[0]), f.minLen)
		if f.minLen > 0 || f.maxLen >= 0 {
			lo, hi := lengths(body)
			if lo < f.minLen || hi < 0 || (f.maxLen >= 0 && hi > f.maxLen) {
				return nil, schemaError(f.ptr, "minLength/maxLength beside format %q is not supported", f.formats[0])
			}
		}
		return newSeq(lit(`"`), body, lit(`"`)), nil
	}
	if len(f.patterns) > 1 {
		// Several patterns are fine when they are the same one.
		for _, p := range f.patterns[1:] {
			if p.v != f.patterns[0].v {
				return nil, schemaError(p.ptr, "more than one pattern on one string is not supported")
			}
		}
	}
	if len(f.patterns) > 0 {
		p := f.patterns[0]
		body, err := patternBody(p.v.(string), f.maxLen, p.ptr)
		if err != nil {
			return nil, err
		}
		if lo, _ := lengths(body); lo < f.minLen {
			body = raiseMinimum(body, f.minLen)
		}
		if lo, _ := lengths(body); lo < f.minLen {
			return nil, schemaError(p.ptr, "pattern %q admits strings shorter than minLength %d (not supported)", p.v, f.minLen)
		}
		if _, hi := lengths(body); f.maxLen >= 0 && (hi < 0 || hi > f.maxLen) {
			return nil, schemaError(p.ptr, "pattern %q cannot be bounded by maxLength %d", p.v, f.maxLen)
		}
		return newSeq(lit(`"`), jsonEncoded(body), lit(`"`)), nil
	}
	if f.minLen == 0 && f.maxLen < 0 {
		return c.stringRule(), nil
	}
	return newSeq(lit(`"`), repeat(c.charRule(), f.minLen, f.maxLen), lit(`"`)), nil
}

// raiseMinimum makes a pattern that is one repetition of single characters (such as
// ^[0-9a-f]*$) repeat at least minLen times; anything else is returned unchanged.
func raiseMinimum(e expr, minLen int) expr {
	r, ok := e.(rep)
	if !ok {
		return e
	}
	if lo, hi := lengths(r.e); lo != 1 || hi != 1 || (r.max >= 0 && r.max < minLen) {
		return e
	}
	r.min = minLen
	return r
}

// lengths returns the fewest and most characters e can match (most < 0: unbounded).
// Literals count their code points; classes one each.
func lengths(e expr) (lo, hi int) {
	switch e := e.(type) {
	case lit:
		n := len([]rune(string(e)))
		return n, n
	case class:
		return 1, 1
	case ref:
		return 0, -1 // rules are not inspected; only built-in format bodies reach here
	case seq:
		for _, p := range e {
			l, h := lengths(p)
			lo += l
			if hi >= 0 {
				if h < 0 {
					hi = -1
				} else {
					hi += h
				}
			}
		}
		return lo, hi
	case alt:
		lo, hi = -1, 0
		for _, p := range e {
			l, h := lengths(p)
			if lo < 0 || l < lo {
				lo = l
			}
			if hi >= 0 && (h < 0 || h > hi) {
				hi = h
			}
		}
		return max(lo, 0), hi
	case rep:
		l, h := lengths(e.e)
		lo = l * e.min
		switch {
		case e.max < 0 && h != 0:
			hi = -1
		case h < 0:
			hi = -1
			if e.max == 0 {
				hi = 0
			}
		case e.max < 0:
			hi = 0
		default:
			hi = h * e.max
		}
		return lo, hi
	}
	return 0, -1
}

// jsonEncoded turns e, a grammar over a string's characters, into a grammar over their
// JSON encoding: '"', '\' and the controls become escapes.
func jsonEncoded(e expr) expr {
	switch e := e.(type) {
	case lit:
		q := quoteJSON(string(e))
		return lit(q[1 : len(q)-1])
	case class:
		return encodeClass(e)
	case seq:
		out := make(seq, len(e))
		for i, p := range e {
			out[i] = jsonEncoded(p)
		}
		return newSeq(out...)
	case alt:
		out := make(alt, len(e))
		for i, p := range e {
			out[i] = jsonEncoded(p)
		}
		return newAlt(out...)
	case rep:
		return rep{e: jsonEncoded(e.e), min: e.min, max: e.max}
	}
	return e
}

// encodeClass writes a character class as the JSON encodings of its members.
func encodeClass(c class) expr {
	in := c.ranges
	if c.negated {
		in = complement(c.ranges)
	}
	special := func(r rune) bool { return r < 0x20 || r == '"' || r == '\\' }
	var plain []runeRange
	var escapes []expr
	for _, rg := range in {
		for r := rg.lo; r <= rg.hi && r < 0x60; r++ {
			if special(r) {
				q := quoteJSON(string(r))
				escapes = append(escapes, lit(q[1:len(q)-1]))
			}
		}
		plain = append(plain, subtract(rg, special)...)
	}
	var choices []expr
	if len(plain) > 0 {
		choices = append(choices, class{ranges: plain})
	}
	choices = append(choices, escapes...)
	if len(choices) == 0 {
		return nil
	}
	return newAlt(choices...)
}

// subtract removes the code points for which drop is true (all below 0x60) and the
// surrogates from rg.
func subtract(rg runeRange, drop func(rune) bool) []runeRange {
	var out []runeRange
	start := rune(-1)
	flush := func(end rune) {
		if start >= 0 {
			out = append(out, runeRange{start, end})
			start = -1
		}
	}
	for r := rg.lo; r <= rg.hi && r < 0x60; r++ {
		if drop(r) {
			flush(r - 1)
		} else if start < 0 {
			start = r
		}
	}
	if rg.hi >= 0x60 {
		if start < 0 {
			start = max(rg.lo, 0x60)
		}
		for _, part := range []runeRange{{start, min(rg.hi, 0xD7FF)}, {max(start, 0xE000), rg.hi}} {
			if part.lo <= part.hi {
				out = append(out, part)
			}
		}
		return out
	}
	flush(rg.hi)
	return out
}

// complement returns the code points not in ranges (sorted and disjoint or not).
func complement(ranges []runeRange) []runeRange {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out []runeRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = max(next, r.hi+1)
	}
	if next <= 0x10FFFF {
		out = append(out, runeRange{next, 0x10FFFF})
	}
	return out
}
