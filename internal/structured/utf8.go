package structured

import (
	"sort"
	"unicode/utf8"
)

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// normalizeRanges sorts and merges rs, and removes the surrogate code points (which UTF-8
// cannot encode).
func normalizeRanges(rs []runeRange) []runeRange {
	var split []runeRange
	for _, r := range rs {
		if r.lo > r.hi {
			continue
		}
		if r.lo < 0xD800 && r.hi > 0xDFFF {
			split = append(split, runeRange{r.lo, 0xD7FF}, runeRange{0xE000, r.hi})
			continue
		}
		if r.lo >= 0xD800 && r.lo <= 0xDFFF {
			r.lo = 0xE000
		}
		if r.hi >= 0xD800 && r.hi <= 0xDFFF {
			r.hi = 0xD7FF
		}
		if r.lo <= r.hi {
			split = append(split, r)
		}
	}
	sort.Slice(split, func(i, j int) bool { return split[i].lo < split[j].lo })
	var out []runeRange
	for _, r := range split {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			if r.hi > out[n-1].hi {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// negateRanges returns the code points (other than surrogates) outside rs.
func negateRanges(rs []runeRange) []runeRange {
	rs = normalizeRanges(rs)
	var out []runeRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return normalizeRanges(out)
}

// classNode returns a byte-level expression matching the UTF-8 encoding of exactly one code
// point in rs.
func classNode(rs []runeRange) *node {
	var alts []*node
	ascii := &node{op: opBytes}
	for _, r := range normalizeRanges(rs) {
		for _, part := range splitByLength(r) {
			if part.hi < utf8.RuneSelf {
				ascii.set.addRange(byte(part.lo), byte(part.hi))
				continue
			}
			alts = utf8Sequences(part, alts)
		}
	}
	if !ascii.set.empty() {
		alts = append([]*node{ascii}, alts...)
	}
	if len(alts) == 0 {
		return &node{op: opBytes} // an empty set: matches nothing
	}
	return altNode(alts...)
}

// splitByLength splits r where the length of the UTF-8 encoding changes.
func splitByLength(r runeRange) []runeRange {
	var out []runeRange
	for _, max := range []rune{0x7F, 0x7FF, 0xFFFF, utf8.MaxRune} {
		if r.lo > r.hi {
			break
		}
		if r.lo <= max {
			hi := min(r.hi, max)
			out = append(out, runeRange{r.lo, hi})
			r.lo = hi + 1
		}
	}
	return out
}

// utf8Sequences appends to alts byte-class sequences matching the encodings of r, whose
// code points all encode to the same number of bytes (two or more). The range is split
// until within each piece every byte position ranges independently.
func utf8Sequences(r runeRange, alts []*node) []*node {
	n := utf8.RuneLen(r.lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if r.lo&^m == r.hi&^m {
			continue
		}
		if r.lo&m != 0 {
			alts = utf8Sequences(runeRange{r.lo, r.lo | m}, alts)
			return utf8Sequences(runeRange{(r.lo | m) + 1, r.hi}, alts)
		}
		if r.hi&m != m {
			alts = utf8Sequences(runeRange{r.lo, r.hi&^m - 1}, alts)
			return utf8Sequences(runeRange{r.hi &^ m, r.hi}, alts)
		}
	}
	lo := make([]byte, 4)
	hi := make([]byte, 4)
	utf8.EncodeRune(lo, r.lo)
	utf8.EncodeRune(hi, r.hi)
	seq := make([]*node, n)
	for i := range n {
		b := &node{op: opBytes}
		b.set.addRange(lo[i], hi[i])
		seq[i] = b
	}
	return append(alts, concatNode(seq...))
}
