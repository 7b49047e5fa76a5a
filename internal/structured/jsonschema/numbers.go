package jsonschema

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Numbers. The grammar writes integers of at most maxDigits digits (so every value it
// writes is exact in a float64) without a leading zero or "-0", and other numbers with at
// most maxDigits fraction digits and, when no bound applies, an exponent of at most two
// digits.

// maxDigits caps the digits of an integer part or a fraction.
const maxDigits = 15

// maxMagnitude is the largest integer part the grammar writes.
const maxMagnitude = 999_999_999_999_999

// maxEnumerated caps how many multiples of multipleOf a range may hold.
const maxEnumerated = 256

// admitsNumber reports whether an enum or const number satisfies the alternative.
func (c *compiler) admitsNumber(f *flat, v any) (bool, error) {
	n, ok := v.(json.Number)
	if !ok {
		return false, nil
	}
	x, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return false, nil
	}
	integral := x == math.Trunc(x)
	if f.types&tNumber == 0 && !(f.types&tInteger != 0 && integral) {
		return false, nil
	}
	if f.lo.set && (x < f.lo.v || (f.lo.excl && x == f.lo.v)) {
		return false, nil
	}
	if f.hi.set && (x > f.hi.v || (f.hi.excl && x == f.hi.v)) {
		return false, nil
	}
	for _, m := range f.multipleOf {
		if q := x / m; q != math.Trunc(q) {
			return false, nil
		}
	}
	return true, nil
}

// compileNumber writes the numbers (or only integers) an alternative admits.
func (c *compiler) compileNumber(f *flat) (expr, error) {
	integer := f.types&tNumber == 0
	noIntegers := f.types&tInteger == 0 // "not": {"type": "integer"} leaves only fractions
	fracDigits := maxDigits
	var step int64 // integer multipleOf, 0: none
	for _, m := range f.multipleOf {
		switch {
		case m == math.Trunc(m) && m <= maxMagnitude:
			s := int64(m)
			if step == 0 {
				step = s
			} else {
				step = lcm(step, s)
			}
			integer = true
		default:
			k, ok := decimalPower(m)
			if !ok {
				return nil, schemaError(f.ptr+"/multipleOf", "multipleOf %v is supported only for integers and for powers of ten (0.1, 0.01, ...)", m)
			}
			fracDigits = min(fracDigits, k)
		}
	}
	var skip []int64 // integers a "not" enum or const rules out
	for _, v := range f.excluded {
		if ok, err := c.admitsNumber(f, v); err != nil || !ok {
			continue
		}
		x, _ := strconv.ParseFloat(string(v.(json.Number)), 64)
		if x != math.Trunc(x) || math.Abs(x) > maxMagnitude {
			return nil, schemaError(f.ptr, "\"not\" with enum or const is supported for integers only, not %v", v)
		}
		skip = append(skip, int64(x))
	}
	slices.Sort(skip)
	if !f.lo.set && !f.hi.set && step == 0 && !noIntegers && len(skip) == 0 {
		if integer {
			return c.integerRule(), nil
		}
		if fracDigits == maxDigits {
			return c.numberRule(), nil
		}
	}
	lo, hi := -float64(maxMagnitude), float64(maxMagnitude)
	if f.lo.set {
		lo = math.Max(lo, f.lo.v)
	}
	if f.hi.set {
		hi = math.Min(hi, f.hi.v)
	}
	// The integers in range.
	ilo, ihi := int64(math.Ceil(lo)), int64(math.Floor(hi))
	if f.lo.set && f.lo.excl && float64(ilo) == f.lo.v {
		ilo++
	}
	if f.hi.set && f.hi.excl && float64(ihi) == f.hi.v {
		ihi--
	}
	var choices []expr
	if noIntegers && step != 0 {
		return nil, nil
	}
	if step != 0 && step <= maxRemainderStates && !f.lo.set && !f.hi.set && len(skip) == 0 {
		return c.multiplesOf(step), nil
	}
	if noIntegers {
		ilo, ihi = 1, 0 // no integral values
	}
	if step != 0 {
		first := ceilDiv(ilo, step) * step
		if ilo > ihi || (ihi-first)/step+1 > maxEnumerated {
			if ilo <= ihi {
				return nil, schemaError(f.ptr+"/multipleOf", "multipleOf %d over a range holding more than %d multiples is not supported (bound it with minimum/maximum)", step, maxEnumerated)
			}
		} else {
			for v := first; v <= ihi; v += step {
				if !slices.Contains(skip, v) {
					choices = append(choices, lit(strconv.FormatInt(v, 10)))
				}
			}
		}
	} else {
		// The range, less the integers skipped: the pieces between them.
		from := ilo
		for _, s := range append(skip, ihi+1) {
			if s > ihi+1 || s < from {
				continue
			}
			if from <= s-1 {
				choices = append(choices, integerRange(from, s-1))
			}
			from = s + 1
		}
	}
	if !integer {
		// k.f with f > 0 lies in (k, k+1): inside [lo, hi] when k >= lo and k+1 <= hi,
		// whether or not the bounds are exclusive; -k.f lies in (-k-1, -k).
		frac := newSeq(lit("."), rep{e: digit(), min: 0, max: fracDigits - 1}, class{ranges: []runeRange{{'1', '9'}}})
		plo, phi := max(int64(math.Ceil(lo)), 0), int64(math.Floor(hi))-1
		if plo <= phi {
			choices = append(choices, newSeq(integerRange(plo, phi), frac))
		}
		nlo, nhi := max(int64(math.Ceil(-hi)), 0), int64(math.Floor(-lo))-1
		if nlo <= nhi {
			choices = append(choices, newSeq(lit("-"), integerRange(nlo, nhi), frac))
		}
	}
	return newAlt(choices...), nil
}

// maxRemainderStates caps the multipleOf written as a remainder automaton.
const maxRemainderStates = 64

// multiplesOf writes every multiple of m (unbounded, so not capped at maxDigits digits):
// reading a number's digits left to right, the remainder modulo m goes from r to
// (10r + d) mod m, and the number is a multiple when it ends at remainder 0. One rule per
// remainder, each digit class leading to the rule of the next remainder.
func (c *compiler) multiplesOf(m int64) expr {
	names := make([]string, m)
	for r := range m {
		names[r] = c.newName("mod" + strconv.FormatInt(m, 10) + "-r" + strconv.FormatInt(r, 10))
	}
	next := func(r int64, lo byte) expr {
		// digits lo..9 grouped by the remainder they lead to
		var choices []expr
		for t := range m {
			var digits []runeRange
			for d := int64(lo - '0'); d <= 9; d++ {
				if (10*r+d)%m == t {
					digits = append(digits, runeRange{rune('0' + d), rune('0' + d)})
				}
			}
			if len(digits) > 0 {
				choices = append(choices, newSeq(class{ranges: digits}, ref(names[t])))
			}
		}
		return newAlt(choices...)
	}
	for r := range m {
		body := next(r, '0')
		if r == 0 {
			body = newAlt(empty, body)
		}
		c.g.rules[names[r]] = body
	}
	return newAlt(lit("0"), newSeq(opt(lit("-")), next(0, '1')))
}

// numberRule returns the rule for any JSON number the grammar writes.
func (c *compiler) numberRule() expr {
	return c.builtin("number", func(expr) expr {
		return newSeq(
			c.integerRule(),
			opt(newSeq(lit("."), rep{e: digit(), min: 1, max: maxDigits})),
			opt(newSeq(class{ranges: []runeRange{{'E', 'E'}, {'e', 'e'}}}, opt(class{ranges: []runeRange{{'+', '+'}, {'-', '-'}}}), rep{e: digit(), min: 1, max: 2})),
		)
	})
}

// integerRule returns the rule for any integer the grammar writes.
func (c *compiler) integerRule() expr {
	return c.builtin("integer", func(expr) expr { return integerRange(-maxMagnitude, maxMagnitude) })
}

// integerRange writes the integers lo..hi in decimal, without leading zeros or "-0".
func integerRange(lo, hi int64) expr {
	var choices []expr
	if lo < 0 {
		// -n for n in max(1, -hi) .. -lo
		nlo := int64(1)
		if hi < 0 {
			nlo = -hi
		}
		choices = append(choices, newSeq(lit("-"), naturalRange(uint64(nlo), uint64(-lo))))
	}
	if hi >= 0 {
		choices = append(choices, naturalRange(uint64(max(lo, 0)), uint64(hi)))
	}
	return newAlt(choices...)
}

// naturalRange writes the numbers lo..hi (lo <= hi) in decimal without leading zeros: the
// range is cut where the digit count changes, and each same-length piece is written digit
// by digit.
func naturalRange(lo, hi uint64) expr {
	var choices []expr
	fullFrom := -1 // the digit count where a run of complete lengths began
	flushFull := func(to int) {
		if fullFrom > 0 {
			choices = append(choices, newSeq(chars('1', '9'), rep{e: digit(), min: fullFrom - 1, max: to - 1}))
			fullFrom = -1
		}
	}
	for lo <= hi {
		s := strconv.FormatUint(lo, 10)
		digits := len(s)
		top := uint64(math.Pow10(digits)) - 1
		if digits >= 20 {
			top = math.MaxUint64
		}
		end := min(top, hi)
		if digits >= 2 && lo == uint64(math.Pow10(digits-1)) && end == top {
			if fullFrom < 0 {
				fullFrom = digits
			}
		} else {
			flushFull(digits - 1)
			choices = append(choices, sameLength(s, strconv.FormatUint(end, 10)))
		}
		if end == math.MaxUint64 {
			break
		}
		lo = end + 1
		if end == hi {
			flushFull(digits)
		}
	}
	return newAlt(choices...)
}

// sameLength writes the decimal strings from a to b, which have the same length.
func sameLength(a, b string) expr {
	if a == b {
		return lit(a)
	}
	if len(a) == 1 {
		return digitRange(a[0], b[0])
	}
	if a[0] == b[0] {
		return newSeq(lit(a[:1]), sameLength(a[1:], b[1:]))
	}
	n := len(a) - 1
	zeros, nines := strings.Repeat("0", n), strings.Repeat("9", n)
	lowFull, highFull := a[1:] == zeros, b[1:] == nines
	midLo, midHi := a[0]+1, b[0]-1
	if lowFull {
		midLo = a[0]
	}
	if highFull {
		midHi = b[0]
	}
	var choices []expr
	if !lowFull {
		// a[0] followed by a[1:]..99..9
		choices = append(choices, newSeq(lit(a[:1]), sameLength(a[1:], nines)))
	}
	if midLo <= midHi {
		choices = append(choices, newSeq(digitRange(midLo, midHi), rep{e: digit(), min: n, max: n}))
	}
	if !highFull {
		choices = append(choices, newSeq(lit(b[:1]), sameLength(zeros, b[1:])))
	}
	return newAlt(choices...)
}

func digitRange(a, b byte) expr {
	if a == b {
		return lit(string(a))
	}
	return class{ranges: []runeRange{{rune(a), rune(b)}}}
}

// decimalPower reports whether m is 10^-k for k in 1..maxDigits, and returns k.
func decimalPower(m float64) (int, bool) {
	for k := 1; k <= maxDigits; k++ {
		if strconv.FormatFloat(m, 'g', -1, 64) == strconv.FormatFloat(math.Pow10(-k), 'g', -1, 64) {
			return k, true
		}
	}
	return 0, false
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b int64) int64 { return a / gcd(a, b) * b }

// ceilDiv is a/b rounded up, for b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}
