package structured

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// op is the kind of an expression node.
type op uint8

const (
	opEmpty  op = iota // the empty string
	opBytes            // one byte from a set
	opConcat           // subs in sequence
	opAlt              // one of subs
	opRepeat           // sub[0] between min and max times (max < 0: unbounded)
	opRef              // a reference to rule ref (grammars only)
)

// node is an expression over bytes: the common form of regular expressions and of the
// right-hand sides of grammar rules (which may also refer to rules). Character classes over
// code points are lowered to byte-level alternatives when parsed (see utf8.go), so every
// leaf matches exactly one byte.
type node struct {
	op       op
	set      byteSet // opBytes
	subs     []*node // opConcat, opAlt, opRepeat (one)
	min, max int     // opRepeat
	ref      int     // opRef: rule index
}

// byteSet is a set of bytes as a 256-bit bitmap.
type byteSet [4]uint64

func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) addRange(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s.add(byte(b))
	}
}
func (s *byteSet) empty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }

// union adds the bytes of t to s.
func (s *byteSet) union(t *byteSet) {
	for w := range s {
		s[w] |= t[w]
	}
}

// contains reports whether every byte of t is in s.
func (s *byteSet) contains(t *byteSet) bool {
	return t[0]&^s[0]|t[1]&^s[1]|t[2]&^s[2]|t[3]&^s[3] == 0
}

func emptyNode() *node { return &node{op: opEmpty} }

func byteNode(b byte) *node {
	n := &node{op: opBytes}
	n.set.add(b)
	return n
}

// literalNode matches the bytes of s in order.
func literalNode(s []byte) *node {
	if len(s) == 1 {
		return byteNode(s[0])
	}
	n := &node{op: opConcat}
	for _, b := range s {
		n.subs = append(n.subs, byteNode(b))
	}
	if len(s) == 0 {
		return emptyNode()
	}
	return n
}

func concatNode(subs ...*node) *node {
	switch len(subs) {
	case 0:
		return emptyNode()
	case 1:
		return subs[0]
	}
	return &node{op: opConcat, subs: subs}
}

func altNode(subs ...*node) *node {
	if len(subs) == 1 {
		return subs[0]
	}
	return &node{op: opAlt, subs: subs}
}

func repeatNode(sub *node, min, max int) *node {
	return &node{op: opRepeat, subs: []*node{sub}, min: min, max: max}
}

// String prints n in a regex-like notation (rules as <N>), used as the identity of
// terminals and in messages.
func (n *node) String() string {
	var b strings.Builder
	n.write(&b)
	return b.String()
}

func (n *node) write(b *strings.Builder) {
	switch n.op {
	case opEmpty:
		b.WriteString("()")
	case opBytes:
		writeSet(b, &n.set)
	case opConcat:
		b.WriteByte('(')
		for _, s := range n.subs {
			s.write(b)
		}
		b.WriteByte(')')
	case opAlt:
		b.WriteByte('(')
		for i, s := range n.subs {
			if i > 0 {
				b.WriteByte('|')
			}
			s.write(b)
		}
		b.WriteByte(')')
	case opRepeat:
		n.subs[0].write(b)
		if n.max < 0 {
			fmt.Fprintf(b, "{%d,}", n.min)
		} else {
			fmt.Fprintf(b, "{%d,%d}", n.min, n.max)
		}
	case opRef:
		fmt.Fprintf(b, "<%d>", n.ref)
	}
}

func writeSet(b *strings.Builder, s *byteSet) {
	count := bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
	if count == 1 {
		for w, word := range s {
			if word != 0 {
				b.WriteString(quoteByte(byte(64*w + bits.TrailingZeros64(word))))
			}
		}
		return
	}
	b.WriteByte('[')
	for c := 0; c < 256; c++ {
		if s[c>>6] == 0 && c&63 == 0 {
			c += 63 // an empty word
			continue
		}
		if !s.has(byte(c)) {
			continue
		}
		e := c
		for e+1 < 256 && s.has(byte(e+1)) {
			e++
		}
		b.WriteString(quoteByte(byte(c)))
		if e > c {
			b.WriteByte('-')
			b.WriteString(quoteByte(byte(e)))
		}
		c = e
	}
	b.WriteByte(']')
}

func quoteByte(c byte) string {
	if c >= 0x21 && c < 0x7f && !strings.ContainsRune(`\[]()|{}*+?-^.`, rune(c)) {
		return string(rune(c))
	}
	return `\x` + strconv.FormatUint(uint64(c)|0x100, 16)[1:]
}
