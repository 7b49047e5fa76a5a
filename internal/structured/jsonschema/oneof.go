package jsonschema

import (
	"encoding/json"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// oneOf: a value must match exactly one branch. The compiler writes, of each branch, only
// values it can prove no other branch matches. It takes every other branch's alternatives
// away from each alternative of a branch, one JSON type at a time: a type the two share
// stays when their parts of it are disjoint (a const or enum discriminator, a required
// property whose values differ or that the other forbids, string patterns with different
// literal prefixes, length, count or numeric ranges that do not meet, element types); it
// goes when every value of it matches both (both whole, or the other branch only a
// "required" list, which matches every value the schema around it does but objects); a
// string or number part keeps the lengths or values outside the other's range; an enum keeps the values
// the other refuses; an object part is split into objects the other refuses (one of the
// other's required properties absent, or one of its own properties present that the other
// forbids). Anything else is refused, naming oneOf.

// typeAtoms are the JSON types one at a time (integers apart from the other numbers).
var typeAtoms = []typeSet{tNull, tBoolean, tObject, tArray, tString, tNumber, tInteger}

// maxProofDepth caps how deep a disjointness proof descends into properties and elements
// (a recursive schema would otherwise descend for ever); past it nothing is proven.
const maxProofDepth = 8

// exclusive makes the alternatives of oneOf's branches exclusive (branches[i]: what branch
// i flattened into, already merged with the schema around it; onlyRequired[i]: branch i is
// only a "required" list, as in oneOf [{"required": ["a"]}, {"required": ["b"]}]), or
// refuses them.
func (c *compiler) exclusive(branches [][]*flat, onlyRequired []bool, ptr string) ([]*flat, error) {
	var out []*flat
	for i, b := range branches {
		for _, x := range b {
			parts := []*flat{x}
			for j, other := range branches {
				if j == i {
					continue
				}
				for _, y := range other {
					var next []*flat
					for _, p := range parts {
						kept, undecided, err := c.subtract(p, y, onlyRequired[j])
						if err != nil {
							return nil, err
						}
						if undecided != 0 {
							return nil, schemaError(ptr, "oneOf: branches %d and %d can both match %s, and exclusivity is not decidable there (the branches need a const, enum, type or required-property discriminator, or ranges that do not meet); use anyOf if a value may match several branches", min(i, j), max(i, j), typeName(undecided))
						}
						next = append(next, kept...)
					}
					if parts = next; len(parts) > maxAlternatives {
						return nil, schemaError(ptr, "oneOf: exclusive branches split into more than %d alternatives", maxAlternatives)
					}
				}
			}
			out = append(out, parts...)
		}
	}
	return out, nil
}

// onlyRequiredList reports whether schema n is an object whose one enforced keyword is
// "required".
func onlyRequiredList(n node) bool {
	o, ok := n.v.(*object)
	if !ok {
		return false
	}
	seen := false
	for _, k := range o.keys {
		switch {
		case k == "required":
			seen = true
		case classify(k) == supported || classify(k) == unsupported:
			return false
		}
	}
	return seen
}

// subtract returns parts of p that y provably does not match (all of p where the two are
// disjoint); undecided names a type of their overlap it cannot take away. yRequired says y
// comes from a branch that is only a "required" list: y is then the schema around the
// oneOf (of which p is a part) with those properties required, so it matches every value
// of p but objects missing one of them.
func (c *compiler) subtract(p, y *flat, yRequired bool) (kept []*flat, undecided typeSet, err error) {
	if isEmpty(p) {
		return nil, 0, nil
	}
	if isEmpty(y) {
		return []*flat{p}, 0, nil
	}
	if p.hasEnum {
		q := p.clone()
		q.enum = q.enum[:0]
		for _, v := range p.enum {
			r, err := c.rejects(y, v, 0)
			if err != nil {
				return nil, 0, err
			}
			if r {
				q.enum = append(q.enum, v)
			}
		}
		if len(q.enum) == 0 {
			return nil, 0, nil
		}
		return []*flat{q}, 0, nil
	}
	if y.hasEnum {
		d, err := c.disjointEnum(p, y, 0)
		if err != nil || !d {
			return nil, p.types & y.types, err
		}
		return []*flat{p}, 0, nil
	}
	types := p.types
	var objects []*flat
	for _, t := range typeAtoms {
		if p.types&y.types&t == 0 {
			continue
		}
		d, err := c.disjointType(p, y, t, 0)
		switch {
		case err != nil:
			return nil, 0, err
		case d:
		case whole(p, t) && whole(y, t), yRequired && t != tObject:
			types &^= t
		case t == tObject:
			if objects, err = c.splitObject(p, y); err != nil {
				return nil, 0, err
			}
			if len(objects) == 0 && !yRequired {
				return nil, t, nil
			}
			types &^= t
		default:
			parts, exact := splitRange(p, y, t)
			if len(parts) == 0 && !exact {
				return nil, t, nil
			}
			types &^= t
			objects = append(objects, parts...)
		}
	}
	if types != 0 {
		q := p.clone()
		q.types = types
		kept = append(kept, q)
	}
	return append(kept, objects...), 0, nil
}

// splitRange returns parts of p's values of type t (a string or number atom) outside y's
// length or numeric range: p with its range cut to below or above y's. exact says the
// parts are all of p's values y does not match (y constrains t by its range alone), so
// that none at all means y matches every one.
func splitRange(p, y *flat, t typeSet) (parts []*flat, exact bool) {
	part := func(edit func(q *flat)) {
		q := p.clone()
		q.types = t
		edit(q)
		parts = append(parts, q)
	}
	if t == tString {
		if y.minLen > p.minLen {
			part(func(q *flat) { q.maxLen = minBound(q.maxLen, y.minLen-1) })
		}
		if y.maxLen >= 0 && (p.maxLen < 0 || p.maxLen > y.maxLen) {
			part(func(q *flat) { q.minLen = max(q.minLen, y.maxLen+1) })
		}
		return parts, len(y.patterns) == 0 && len(y.formats) == 0 && len(y.excluded) == 0
	}
	if y.lo.set {
		part(func(q *flat) { q.tighten(false, bound{v: y.lo.v, excl: !y.lo.excl, set: true}) })
	}
	if y.hi.set {
		part(func(q *flat) { q.tighten(true, bound{v: y.hi.v, excl: !y.hi.excl, set: true}) })
	}
	parts = slices.DeleteFunc(parts, func(q *flat) bool { return boundsApart(q.hi, q.lo) })
	return parts, len(y.multipleOf) == 0 && len(y.excluded) == 0
}

// splitObject returns objects of p that y provably refuses: p with one of y's required
// properties absent, or with one of p's properties present that y forbids.
func (c *compiler) splitObject(p, y *flat) ([]*flat, error) {
	var out []*flat
	try := func(q *flat) error {
		q.types = tObject
		d, err := c.disjointType(q, y, tObject, 0)
		if err == nil && d {
			out = append(out, q)
		}
		return err
	}
	for _, n := range y.required {
		if slices.Contains(p.required, n) || slices.Contains(p.forbidden, n) {
			continue
		}
		q := p.clone()
		q.forbidden = append(q.forbidden, n)
		if err := try(q); err != nil {
			return nil, err
		}
	}
	for _, pr := range p.props {
		if slices.Contains(p.required, pr.name) || slices.Contains(p.forbidden, pr.name) {
			continue
		}
		q := p.clone()
		q.required = append(q.required, pr.name)
		if err := try(q); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// disjoint reports whether no value matches both x and y, as far as it can prove.
func (c *compiler) disjoint(x, y *flat, depth int) (bool, error) {
	if isEmpty(x) || isEmpty(y) {
		return true, nil
	}
	if x.hasEnum || y.hasEnum {
		return c.disjointEnum(x, y, depth)
	}
	for _, t := range typeAtoms {
		if x.types&y.types&t == 0 {
			continue
		}
		if d, err := c.disjointType(x, y, t, depth); err != nil || !d {
			return false, err
		}
	}
	return true, nil
}

// disjointEnum proves an enum side apart: each of its values is refused by one of the two.
func (c *compiler) disjointEnum(x, y *flat, depth int) (bool, error) {
	if !x.hasEnum {
		x, y = y, x
	}
	for _, v := range x.enum {
		ry, err := c.rejects(y, v, depth)
		if err != nil {
			return false, err
		}
		if ry {
			continue
		}
		rx, err := c.rejects(x, v, depth)
		if err != nil || !rx {
			return false, err
		}
	}
	return true, nil
}

// disjointType reports whether x and y (neither with an enum) share no value of type t.
func (c *compiler) disjointType(x, y *flat, t typeSet, depth int) (bool, error) {
	switch t {
	case tString:
		return apart(x.minLen, x.maxLen, y.minLen, y.maxLen) || prefixesApart(x.patterns, y.patterns), nil
	case tNumber, tInteger:
		return boundsApart(x.hi, y.lo) || boundsApart(y.hi, x.lo), nil
	case tArray:
		if apart(x.minItems, x.maxItems, y.minItems, y.maxItems) {
			return true, nil
		}
		if depth >= maxProofDepth {
			return false, nil
		}
		for i := range min(x.minItems, y.minItems, len(x.prefix)+1, len(y.prefix)+1) {
			if d, err := c.disjointNodes(elementNodes(x, i), elementNodes(y, i), depth+1); err != nil || d {
				return d, err
			}
		}
	case tObject:
		if apart(x.minProps, x.maxProps, y.minProps, y.maxProps) {
			return true, nil
		}
		if depth >= maxProofDepth {
			return false, nil
		}
		for _, names := range [][]string{x.required, y.required} {
			for _, n := range names {
				if slices.Contains(x.forbidden, n) || slices.Contains(y.forbidden, n) {
					return true, nil
				}
				if d, err := c.disjointNodes(propertyNodes(x, n), propertyNodes(y, n), depth+1); err != nil || d {
					return d, err
				}
			}
		}
	}
	return false, nil
}

// disjointNodes reports whether no value satisfies both the conjunction a and the
// conjunction b.
func (c *compiler) disjointNodes(a, b []node, depth int) (bool, error) {
	fa, err := c.flatten(a, "")
	if err != nil {
		return false, err
	}
	fb, err := c.flatten(b, "")
	if err != nil {
		return false, err
	}
	for _, x := range fa {
		for _, y := range fb {
			if d, err := c.disjoint(x, y, depth); err != nil || !d {
				return false, err
			}
		}
	}
	return true, nil
}

// rejects reports whether value v provably fails alternative f.
func (c *compiler) rejects(f *flat, v any, depth int) (bool, error) {
	if f.types&valueType(v) == 0 {
		return true, nil
	}
	if (f.hasEnum && !containsValue(f.enum, v)) || containsValue(f.excluded, v) {
		return true, nil
	}
	switch v := v.(type) {
	case string:
		n := utf8.RuneCountInString(v)
		if n < f.minLen || (f.maxLen >= 0 && n > f.maxLen) {
			return true, nil
		}
		for _, p := range f.patterns {
			re, err := regexp.Compile(p.v.(string))
			if err != nil {
				return false, schemaError(p.ptr, "pattern %q: %v", p.v, err)
			}
			if !re.MatchString(v) {
				return true, nil
			}
		}
	case json.Number:
		ok, err := c.admitsNumber(f, v)
		return !ok, err
	case []any:
		if len(v) < f.minItems || (f.maxItems >= 0 && len(v) > f.maxItems) {
			return true, nil
		}
		if depth >= maxProofDepth {
			return false, nil
		}
		for i, e := range v {
			if r, err := c.rejectsAll(elementNodes(f, i), e, depth+1); err != nil || r {
				return r, err
			}
		}
	case *object:
		if len(v.keys) < f.minProps || (f.maxProps >= 0 && len(v.keys) > f.maxProps) {
			return true, nil
		}
		for _, n := range f.required {
			if _, ok := v.vals[n]; !ok {
				return true, nil
			}
		}
		for _, n := range f.forbidden {
			if _, ok := v.vals[n]; ok {
				return true, nil
			}
		}
		if depth >= maxProofDepth {
			return false, nil
		}
		for _, k := range v.keys {
			if r, err := c.rejectsAll(propertyNodes(f, k), v.vals[k], depth+1); err != nil || r {
				return r, err
			}
		}
	}
	return false, nil
}

// rejectsAll reports whether v provably fails the conjunction nodes.
func (c *compiler) rejectsAll(nodes []node, v any, depth int) (bool, error) {
	fs, err := c.flatten(nodes, "")
	if err != nil {
		return false, err
	}
	for _, f := range fs {
		if r, err := c.rejects(f, v, depth); err != nil || !r {
			return false, err
		}
	}
	return true, nil
}

// propertyNodes are the schemas property name's value satisfies in f when present: its
// declared schemas and those of the patterns it matches, or additionalProperties when
// there are none (nil: any value; also when a pattern cannot be read, which only weakens
// a proof).
func propertyNodes(f *flat, name string) []node {
	var out []node
	for _, p := range f.props {
		if p.name == name {
			out = append(out, p.nodes...)
		}
	}
	for _, p := range f.patternProps {
		re, err := regexp.Compile(p.re)
		if err != nil {
			return nil
		}
		if re.MatchString(name) {
			out = append(out, p.node)
		}
	}
	if len(out) == 0 {
		return f.addl
	}
	return out
}

// prefixesApart reports whether two lists of patterns (each a string must match) hold
// patterns anchored to literal prefixes neither of which begins the other.
func prefixesApart(a, b []node) bool {
	for _, pa := range a {
		la, ok := literalPrefix(pa.v.(string))
		if !ok {
			continue
		}
		for _, pb := range b {
			lb, ok := literalPrefix(pb.v.(string))
			if ok && !strings.HasPrefix(la, lb) && !strings.HasPrefix(lb, la) {
				return true
			}
		}
	}
	return false
}

// literalPrefix returns the literal text a pattern anchored with ^ demands first.
func literalPrefix(p string) (string, bool) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return "", false
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) < 2 || re.Sub[0].Op != syntax.OpBeginText {
		return "", false
	}
	var b strings.Builder
	for _, s := range re.Sub[1:] {
		if s.Op != syntax.OpLiteral || s.Flags&syntax.FoldCase != 0 {
			break
		}
		b.WriteString(string(s.Rune))
	}
	return b.String(), b.Len() > 0
}

// elementNodes are the schemas element i of an array satisfies in f.
func elementNodes(f *flat, i int) []node {
	if i < len(f.prefix) {
		return f.prefix[i]
	}
	return f.items
}

// whole reports whether f admits every value of type t.
func whole(f *flat, t typeSet) bool {
	if f.hasEnum || len(f.excluded) > 0 {
		return false
	}
	switch t {
	case tString:
		return f.minLen == 0 && f.maxLen < 0 && len(f.patterns) == 0 && len(f.formats) == 0
	case tNumber, tInteger:
		return !f.lo.set && !f.hi.set && len(f.multipleOf) == 0
	case tArray:
		return len(f.prefix) == 0 && len(f.items) == 0 && len(f.contains) == 0 && f.minItems == 0 && f.maxItems < 0 && !f.unique
	case tObject:
		return !f.shaped && len(f.required) == 0 && len(f.forbidden) == 0 && len(f.namePatterns) == 0 && f.minProps == 0 && f.maxProps < 0
	}
	return true // null and boolean carry no further constraint
}

// isEmpty reports whether f plainly admits nothing.
func isEmpty(f *flat) bool { return f.types == 0 || (f.hasEnum && len(f.enum) == 0) }

// apart reports whether the count ranges lo1..hi1 and lo2..hi2 (hi < 0: unbounded) do not
// meet.
func apart(lo1, hi1, lo2, hi2 int) bool {
	return (hi1 >= 0 && hi1 < lo2) || (hi2 >= 0 && hi2 < lo1)
}

// boundsApart reports whether no number is both at most hi and at least lo.
func boundsApart(hi, lo bound) bool {
	return hi.set && lo.set && (hi.v < lo.v || (hi.v == lo.v && (hi.excl || lo.excl)))
}

// valueType is the JSON type of a decoded value.
func valueType(v any) typeSet {
	switch v := v.(type) {
	case nil:
		return tNull
	case bool:
		return tBoolean
	case string:
		return tString
	case []any:
		return tArray
	case *object:
		return tObject
	case json.Number:
		x, err := strconv.ParseFloat(string(v), 64)
		if err == nil && x == math.Trunc(x) {
			return tInteger
		}
		return tNumber
	}
	return 0
}

// typeName names a type atom in an error.
func typeName(t typeSet) string {
	switch {
	case t&tNull != 0:
		return "null"
	case t&tBoolean != 0:
		return "a boolean"
	case t&tObject != 0:
		return "an object"
	case t&tArray != 0:
		return "an array"
	case t&tString != 0:
		return "a string"
	case t&tInteger != 0:
		return "an integer"
	case t&tNumber != 0:
		return "a number"
	}
	return "a value"
}

func containsValue(vals []any, v any) bool {
	for _, e := range vals {
		if equalJSON(e, v) {
			return true
		}
	}
	return false
}
