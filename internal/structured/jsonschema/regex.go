package jsonschema

import (
	"errors"
	"regexp/syntax"
	"strings"
	"unicode"
)

// A JSON Schema pattern is a regular expression that the string must contain somewhere
// (it is not anchored unless it says ^ or $). The compiler parses it with Go's
// regexp/syntax (RE2: no backreferences, no lookaround) and writes it as a grammar over the
// string's characters; jsonEncoded then writes those characters as JSON does.

// maxRepeat caps the counted repetitions a pattern may ask for.
const maxRepeat = 1000

// parsePattern parses a pattern, explaining what RE2 refuses.
func parsePattern(p, ptr string) (*syntax.Regexp, error) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			switch {
			case se.Code == syntax.ErrInvalidPerlOp && (strings.HasPrefix(se.Expr, "(?=") || strings.HasPrefix(se.Expr, "(?!") || strings.HasPrefix(se.Expr, "(?<=") || strings.HasPrefix(se.Expr, "(?<!")):
				return nil, schemaError(ptr, "pattern %q: lookaround %s is not supported", p, se.Expr)
			case se.Code == syntax.ErrInvalidEscape && len(se.Expr) == 2 && se.Expr[1] >= '1' && se.Expr[1] <= '9':
				return nil, schemaError(ptr, "pattern %q: backreference %s is not supported", p, se.Expr)
			}
		}
		return nil, schemaError(ptr, "pattern %q: %v", p, err)
	}
	return re.Simplify(), nil
}

// patternBody writes the strings (as characters, not yet JSON-encoded) in which pattern p
// finds a match. When maxLen >= 0, unbounded repetitions are capped as tightly as needed for
// the longest string to fit in maxLen characters, when that is possible.
func patternBody(p string, maxLen int, ptr string) (expr, error) {
	re, err := parsePattern(p, ptr)
	if err != nil {
		return nil, err
	}
	var branches []*syntax.Regexp
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	} else {
		branches = []*syntax.Regexp{re}
	}
	anyText := rep{e: class{negated: true}, min: 0, max: -1}
	var choices []expr
	for _, b := range branches {
		parts := []*syntax.Regexp{b}
		if b.Op == syntax.OpConcat {
			parts = b.Sub
		}
		start, end := false, false
		if len(parts) > 0 && isBegin(parts[0]) {
			start, parts = true, parts[1:]
		}
		if len(parts) > 0 && isEnd(parts[len(parts)-1]) {
			end, parts = true, parts[:len(parts)-1]
		}
		var seqParts []expr
		if !start {
			seqParts = append(seqParts, anyText)
		}
		for _, part := range parts {
			e, err := regexExpr(part, p, ptr)
			if err != nil {
				return nil, err
			}
			if e == nil {
				seqParts = nil
				break
			}
			seqParts = append(seqParts, e)
		}
		if seqParts == nil && len(parts) > 0 {
			continue // this branch matches nothing
		}
		if !end {
			seqParts = append(seqParts, anyText)
		}
		choices = append(choices, newSeq(seqParts...))
	}
	if len(choices) == 0 {
		return nil, schemaError(ptr, "pattern %q matches no string", p)
	}
	body := newAlt(choices...)
	if maxLen >= 0 {
		if _, hi := lengths(body); hi < 0 || hi > maxLen {
			body = fitLength(body, maxLen)
		}
	}
	return body, nil
}

// fitLength caps every repetition of e at k more than its minimum, for the largest k that
// keeps the longest match within maxLen characters (k = 0 when none does).
func fitLength(e expr, maxLen int) expr {
	lo, hi := 0, maxLen
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if _, h := lengths(capRepeats(e, mid)); h >= 0 && h <= maxLen {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return capRepeats(e, lo)
}

// capRepeats limits each repetition of e to at most its minimum plus k.
func capRepeats(e expr, k int) expr {
	switch e := e.(type) {
	case seq:
		out := make(seq, len(e))
		for i, p := range e {
			out[i] = capRepeats(p, k)
		}
		return out
	case alt:
		out := make(alt, len(e))
		for i, p := range e {
			out[i] = capRepeats(p, k)
		}
		return out
	case rep:
		m := e.max
		if m < 0 || m > e.min+k {
			m = e.min + k
		}
		return rep{e: capRepeats(e.e, k), min: e.min, max: m}
	}
	return e
}

func isBegin(re *syntax.Regexp) bool {
	return re.Op == syntax.OpBeginText || re.Op == syntax.OpBeginLine
}

func isEnd(re *syntax.Regexp) bool {
	return re.Op == syntax.OpEndText || re.Op == syntax.OpEndLine
}

// regexExpr translates one regular expression node; nil means it matches nothing.
func regexExpr(re *syntax.Regexp, p, ptr string) (expr, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return nil, nil
	case syntax.OpEmptyMatch:
		return empty, nil
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			var parts []expr
			for _, r := range re.Rune {
				parts = append(parts, foldClass(r))
			}
			return newSeq(parts...), nil
		}
		return lit(string(re.Rune)), nil
	case syntax.OpCharClass:
		var rs []runeRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			rs = append(rs, runeRange{re.Rune[i], re.Rune[i+1]})
		}
		if len(rs) == 0 {
			return nil, nil
		}
		return class{ranges: rs}, nil
	case syntax.OpAnyCharNotNL:
		return class{negated: true, ranges: []runeRange{{'\n', '\n'}}}, nil
	case syntax.OpAnyChar:
		return class{negated: true}, nil
	case syntax.OpCapture:
		return regexExpr(re.Sub[0], p, ptr)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := regexExpr(re.Sub[0], p, ptr)
		if err != nil {
			return nil, err
		}
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if lo > maxRepeat || hi > maxRepeat {
			return nil, schemaError(ptr, "pattern %q: a repetition above %d is not supported", p, maxRepeat)
		}
		if sub == nil {
			if lo == 0 {
				return empty, nil
			}
			return nil, nil
		}
		return rep{e: sub, min: lo, max: hi}, nil
	case syntax.OpConcat:
		var parts []expr
		for _, s := range re.Sub {
			e, err := regexExpr(s, p, ptr)
			if err != nil || e == nil {
				return nil, err
			}
			parts = append(parts, e)
		}
		return newSeq(parts...), nil
	case syntax.OpAlternate:
		var choices []expr
		for _, s := range re.Sub {
			e, err := regexExpr(s, p, ptr)
			if err != nil {
				return nil, err
			}
			if e != nil {
				choices = append(choices, e)
			}
		}
		return newAlt(choices...), nil
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return nil, schemaError(ptr, "pattern %q: ^ or $ inside the expression is not supported (only at its start and end)", p)
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, schemaError(ptr, "pattern %q: word boundaries (\\b, \\B) are not supported", p)
	}
	return nil, schemaError(ptr, "pattern %q: unsupported construct %v", p, re.Op)
}

// foldClass matches r in any case.
func foldClass(r rune) class {
	c := class{ranges: []runeRange{{r, r}}}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		c.ranges = append(c.ranges, runeRange{f, f})
	}
	return c
}

// patternString writes a JSON string (quotes included) in which pattern p finds a match.
func patternString(p string, maxLen int, ptr string) (expr, error) {
	body, err := patternBody(p, maxLen, ptr)
	if err != nil {
		return nil, err
	}
	return newSeq(lit(`"`), jsonEncoded(body), lit(`"`)), nil
}

// whitespaceExpr translates Options.WhitespacePattern: the whole text between two tokens
// must match it, it may hold only JSON whitespace, and its matches must be bounded.
func whitespaceExpr(p string) (expr, error) {
	re, err := parsePattern(p, "")
	if err != nil {
		return nil, errors.New("whitespace pattern: " + strings.TrimPrefix(err.Error(), "json schema #: "))
	}
	e, err := regexExpr(re, p, "")
	if err != nil {
		return nil, errors.New("whitespace pattern: " + strings.TrimPrefix(err.Error(), "json schema #: "))
	}
	if e == nil {
		return nil, errors.New("whitespace pattern " + p + " matches nothing")
	}
	if _, hi := lengths(e); hi < 0 {
		return nil, errors.New("whitespace pattern " + p + " admits unbounded whitespace; bound it, as in [ \\t\\n]{0,20}")
	}
	if !onlyWhitespace(e) {
		return nil, errors.New("whitespace pattern " + p + " admits characters other than space, tab, newline and carriage return")
	}
	return e, nil
}

// onlyWhitespace reports whether every character e matches is JSON whitespace.
func onlyWhitespace(e expr) bool {
	ws := func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
	switch e := e.(type) {
	case lit:
		return strings.IndexFunc(string(e), func(r rune) bool { return !ws(r) }) < 0
	case class:
		if e.negated {
			return false
		}
		for _, rg := range e.ranges {
			for r := rg.lo; r <= rg.hi; r++ {
				if !ws(r) {
					return false
				}
			}
		}
		return true
	case seq:
		for _, p := range e {
			if !onlyWhitespace(p) {
				return false
			}
		}
		return true
	case alt:
		for _, p := range e {
			if !onlyWhitespace(p) {
				return false
			}
		}
		return true
	case rep:
		return onlyWhitespace(e.e)
	}
	return false
}
