package jsonschema

// String formats. Each grammar writes a subset of the format's strings that every
// validator accepts (for instance only days that exist in every year, only the full
// eight-group form of IPv6): what the grammar writes is valid, but not every valid string
// can be written. Formats not listed here are annotations (as JSON Schema 2020-12 says by
// default) and leave the string unconstrained.

// knownFormat reports whether the grammar enforces format s.
func knownFormat(s string) bool {
	switch s {
	case "date", "time", "date-time", "email", "uuid", "uri", "ipv4", "ipv6":
		return true
	}
	return false
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
	case "email":
		atom := rep{e: class{ranges: []runeRange{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}, {'+', '+'}, {'-', '-'}}}, min: 1, max: 32}
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
