package jsonschema

import (
	"regexp/syntax"
	"unicode/utf8"
)

// String formats. Each grammar writes a subset of the format's strings that every
// validator accepts (for instance only days that exist in every year, only the full
// eight-group form of IPv6): what the grammar writes is valid, but not every valid string
// can be written. Formats not listed here are annotations (as JSON Schema 2020-12 says by
// default) and leave the string unconstrained.

// knownFormat reports whether the grammar enforces format s.
func knownFormat(s string) bool {
	return formatExpr(s) != nil
}

// refusedFormat reports whether s is a standard format the grammar does not write (a
// schema using it is refused rather than left unchecked).
func refusedFormat(s string) bool {
	return s == "period"
}

func chars(lo, hi rune) class { return class{ranges: []runeRange{{lo, hi}}} }

func exactly(e expr, n int) expr { return rep{e: e, min: n, max: n} }

// formatExpr writes the characters of a string in format s (one knownFormat accepts).
func formatExpr(s string) expr {
	switch s {
	case "date":
		return dateExpr()
	case "time":
		return timeExpr()
	case "date-time":
		return newSeq(dateExpr(), lit("T"), timeExpr())
	case "hostname", "idn-hostname":
		return hostname()
	case "iri", "uri-template":
		return formatExpr("uri")
	case "uri-reference", "iri-reference":
		segment := rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'-', '.'}, {'_', '_'}, {'~', '~'}}}, min: 1, max: 32}
		return newAlt(formatExpr("uri"), newSeq(opt(lit("/")), segment, rep{e: newSeq(lit("/"), segment), min: 0, max: 16}))
	case "json-pointer":
		return rep{e: newSeq(lit("/"), rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}, {'-', '-'}}}, min: 0, max: 32}), min: 0, max: 16}
	case "relative-json-pointer":
		return newSeq(naturalRange(0, 999), newAlt(lit("#"), formatExpr("json-pointer")))
	case "duration":
		n := newSeq(chars('1', '9'), rep{e: digit(), min: 0, max: 3})
		return newSeq(lit("P"), newAlt(newSeq(n, lit("D")), newSeq(lit("T"), n, class{ranges: []runeRange{{'H', 'H'}, {'M', 'M'}, {'S', 'S'}}}), newSeq(n, lit("W"))))
	case "semver":
		n := naturalRange(0, 9999)
		return newSeq(n, lit("."), n, lit("."), n)
	case "regex":
		// Letters, digits, spaces, '_' and '-' only: always a valid regular expression.
		return rep{e: class{ranges: []runeRange{{' ', ' '}, {'-', '-'}, {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}}, min: 0, max: 64}
	case "email", "idn-email":
		atom := rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}, {'-', '-'}}}, min: 1, max: 32}
		return newSeq(atom, rep{e: newSeq(lit("."), atom), min: 0, max: 3}, lit("@"), hostname())
	case "uuid":
		h := hexDigit()
		return newSeq(exactly(h, 8), lit("-"), exactly(h, 4), lit("-"), exactly(h, 4), lit("-"), exactly(h, 4), lit("-"), exactly(h, 12))
	case "uri":
		scheme := newSeq(chars('a', 'z'), rep{e: class{ranges: []runeRange{{'a', 'z'}, {'0', '9'}, {'+', '+'}, {'-', '.'}}}, min: 0, max: 15})
		segment := rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'-', '.'}, {'_', '_'}, {'~', '~'}}}, min: 0, max: 32}
		query := rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'-', '.'}, {'_', '_'}, {'~', '~'}, {'=', '='}, {'&', '&'}}}, min: 0, max: 64}
		return newSeq(scheme, lit("://"), hostname(), rep{e: newSeq(lit("/"), segment), min: 0, max: 16}, opt(newSeq(lit("?"), query)))
	case "ipv4":
		octet := naturalRange(0, 255)
		return newSeq(octet, exactly(newSeq(lit("."), octet), 3))
	case "ipv6":
		group := rep{e: hexDigit(), min: 1, max: 4}
		return newSeq(group, exactly(newSeq(lit(":"), group), 7))
	}
	return nil
}

// hostname writes dot-separated DNS labels ending in a letters-only top-level label.
func hostname() expr {
	alnum := class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}}}
	label := newSeq(alnum, opt(newSeq(rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'-', '-'}}}, min: 0, max: 30}, alnum)))
	tld := rep{e: class{ranges: []runeRange{{'A', 'Z'}, {'a', 'z'}}}, min: 2, max: 12}
	return newSeq(label, rep{e: newSeq(lit("."), label), min: 0, max: 3}, lit("."), tld)
}

// dateExpr writes RFC 3339 full-date, with the days that exist in every year (so no
// February 29).
func dateExpr() expr {
	year := exactly(digit(), 4)
	day28 := newAlt(newSeq(lit("0"), chars('1', '9')), newSeq(lit("1"), digit()), newSeq(lit("2"), chars('0', '8')))
	monthDay := newAlt(
		newSeq(newAlt(newSeq(lit("0"), chars('1', '9')), newSeq(lit("1"), chars('0', '2'))), lit("-"), day28),
		newSeq(newAlt(lit("01"), newSeq(lit("0"), chars('3', '9')), newSeq(lit("1"), chars('0', '2'))), lit("-"), lit("29")),
		newSeq(newAlt(lit("01"), newSeq(lit("0"), chars('3', '9')), newSeq(lit("1"), chars('0', '2'))), lit("-"), lit("30")),
		newSeq(newAlt(lit("01"), lit("03"), lit("05"), lit("07"), lit("08"), lit("10"), lit("12")), lit("-"), lit("31")),
	)
	return newSeq(year, lit("-"), monthDay)
}

// timeExpr writes RFC 3339 full-time (no leap second): hh:mm:ss, an optional fraction, and
// Z or an offset.
func timeExpr() expr {
	hour := newAlt(newSeq(chars('0', '1'), digit()), newSeq(lit("2"), chars('0', '3')))
	minsec := newSeq(chars('0', '5'), digit())
	offset := newAlt(lit("Z"), newSeq(class{ranges: []runeRange{{'+', '+'}, {'-', '-'}}}, hour, lit(":"), minsec))
	return newSeq(hour, lit(":"), minsec, lit(":"), minsec, opt(newSeq(lit("."), rep{e: digit(), min: 1, max: 9})), offset)
}

// formatWithPrefix writes the strings of format s that start with one of the literal
// prefixes a pattern such as ^https?:// demands: each prefix followed by the derivative
// of the format's grammar by it (what may follow that prefix). It returns nil when the
// pattern is not of that form or no string of the format has such a prefix.
func formatWithPrefix(format, pattern string) expr {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) < 2 || !isBegin(re.Sub[0]) {
		return nil
	}
	prefixes := []string{""}
	for _, part := range re.Sub[1:] {
		strs, ok := finiteStrings(part)
		if !ok || len(prefixes)*len(strs) > 16 {
			return nil
		}
		var next []string
		for _, p := range prefixes {
			for _, s := range strs {
				next = append(next, p+s)
			}
		}
		prefixes = next
	}
	var choices []expr
	for _, p := range prefixes {
		d := formatExpr(format)
		for _, r := range p {
			if d = derive(d, r); d == nil {
				break
			}
		}
		if d != nil {
			choices = append(choices, newSeq(lit(p), d))
		}
	}
	return newAlt(choices...)
}

// finiteStrings lists the strings a case-sensitive regular expression of literals,
// optionals, alternatives and concatenations matches.
func finiteStrings(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		return []string{string(re.Rune)}, true
	case syntax.OpCapture:
		return finiteStrings(re.Sub[0])
	case syntax.OpQuest:
		s, ok := finiteStrings(re.Sub[0])
		return append([]string{""}, s...), ok
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			s, ok := finiteStrings(sub)
			if !ok {
				return nil, false
			}
			out = append(out, s...)
		}
		return out, true
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			s, ok := finiteStrings(sub)
			if !ok || len(out)*len(s) > 16 {
				return nil, false
			}
			var next []string
			for _, a := range out {
				for _, b := range s {
					next = append(next, a+b)
				}
			}
			out = next
		}
		return out, true
	case syntax.OpCharClass:
		if len(re.Rune) == 2 && re.Rune[0] == re.Rune[1] {
			return []string{string(re.Rune[0])}, true
		}
	}
	return nil, false
}

// derive returns the Brzozowski derivative of e (a grammar without rule references) by r:
// what may follow r in the strings of e; nil when no string of e starts with r.
func derive(e expr, r rune) expr {
	switch e := e.(type) {
	case lit:
		s := string(e)
		if first, n := utf8.DecodeRuneInString(s); s != "" && first == r {
			return lit(s[n:])
		}
		return nil
	case class:
		in := false
		for _, rg := range e.ranges {
			if r >= rg.lo && r <= rg.hi {
				in = true
			}
		}
		if in != e.negated {
			return empty
		}
		return nil
	case seq:
		if len(e) == 0 {
			return nil
		}
		var choices []expr
		if d := derive(e[0], r); d != nil {
			choices = append(choices, newSeq(append([]expr{d}, e[1:]...)...))
		}
		if nullableExpr(e[0]) {
			if d := derive(newSeq(e[1:]...), r); d != nil {
				choices = append(choices, d)
			}
		}
		return newAlt(choices...)
	case alt:
		var choices []expr
		for _, c := range e {
			if d := derive(c, r); d != nil {
				choices = append(choices, d)
			}
		}
		return newAlt(choices...)
	case rep:
		if e.max == 0 {
			return nil
		}
		d := derive(e.e, r)
		if d == nil {
			return nil
		}
		rest := rep{e: e.e, min: max(e.min-1, 0), max: e.max - 1}
		if e.max < 0 {
			rest.max = -1
		}
		return newSeq(d, rest)
	}
	return nil
}

// nullableExpr reports whether e (without rule references) matches the empty string.
func nullableExpr(e expr) bool {
	var g grammar
	return g.nullable(e, nil)
}
