package jsonschema

import (
	"regexp"
	"slices"
	"strconv"
)

// slot is one optional or required member of a counted list (an object's declared
// properties, a unique array's values).
type slot struct {
	e        expr
	required bool
}

// maxCountedRules caps the rules a counted list (minProperties, maxProperties, unique
// items) may take.
const maxCountedRules = 20000

// counted writes the comma-separated members of slots in order, each present or absent
// (required ones always present), followed by any number of extra members when extra is
// not nil. The count of members present is at least minN and at most maxN (maxN < 0: no
// limit); extra members count fully toward maxN but only as one toward minN, because
// extras may repeat a key and so may stand for a single property.
func (c *compiler) counted(base string, slots []slot, minN, maxN int, extra expr) (expr, error) {
	n := len(slots)
	if maxN >= 0 && extra == nil && maxN >= n {
		maxN = -1 // cannot be exceeded
	}
	k := max(minN, 1)
	if maxN >= 0 {
		k = max(k, maxN)
	}
	if (n+1)*(k+1) > maxCountedRules {
		return nil, schemaError("", "%s: minProperties/maxProperties/minItems/maxItems with these counts need more than %d grammar rules", base, maxCountedRules)
	}
	sep := newSeq(c.ws, lit(","), c.ws)
	if extra != nil {
		if _, isRef := extra.(ref); !isRef {
			extra = c.define(base+"-extra", extra)
		}
	}
	extras := func(done int) expr {
		need := minN - done
		if extra == nil {
			if need <= 0 {
				return empty
			}
			return nil
		}
		if need >= 2 {
			return nil
		}
		lo, hi := max(need, 0), -1
		if maxN >= 0 {
			hi = maxN - done
			if hi < lo {
				return nil
			}
		}
		if hi == 0 {
			return empty
		}
		if done > 0 {
			return rep{e: newSeq(sep, extra), min: lo, max: hi}
		}
		var rest expr = empty
		if hi != 1 {
			rest = rep{e: newSeq(sep, extra), min: 0, max: max(hi-1, -1)}
		}
		first := newSeq(extra, rest)
		if lo == 0 {
			return opt(first)
		}
		return first
	}
	memo := map[[2]int]expr{}
	seen := map[[2]int]bool{}
	var tail func(i, done int) expr
	tail = func(i, done int) expr {
		key := [2]int{i, done}
		if seen[key] {
			return memo[key]
		}
		seen[key] = true
		if i == n {
			memo[key] = extras(done)
			return memo[key]
		}
		var choices []expr
		if !slots[i].required {
			if e := tail(i+1, done); e != nil {
				choices = append(choices, e)
			}
		}
		if maxN < 0 || done+1 <= maxN {
			if rest := tail(i+1, min(done+1, k)); rest != nil {
				var s expr = empty
				if done > 0 {
					s = sep
				}
				choices = append(choices, newSeq(s, slots[i].e, rest))
			}
		}
		var e expr
		switch len(choices) {
		case 0:
		case 1:
			e = choices[0]
		default:
			e = c.define(base+"-"+strconv.Itoa(i)+"-"+strconv.Itoa(done), newAlt(choices...))
		}
		memo[key] = e
		return e
	}
	return tail(0, 0), nil
}

// compileObject writes the objects an alternative admits: its declared properties in the
// schema's order (optional ones may be left out), then extra properties where
// additionalProperties or patternProperties allow them.
func (c *compiler) compileObject(f *flat) (expr, error) {
	pats := make([]*regexp.Regexp, len(f.patternProps))
	for i, p := range f.patternProps {
		if _, err := parsePattern(p.re, p.node.ptr); err != nil {
			return nil, err // names lookaround and backreferences
		}
		re, err := regexp.Compile(p.re)
		if err != nil {
			return nil, schemaError(p.node.ptr, "patternProperties pattern %q: %v", p.re, err)
		}
		pats[i] = re
	}
	names, err := c.namePattern(f, len(pats) > 0)
	if err != nil {
		return nil, err
	}
	// A declared property's value must also satisfy each pattern its name matches.
	withPatterns := func(name string, nodes []node) []node {
		out := slices.Clone(nodes)
		for i, re := range pats {
			if re.MatchString(name) {
				out = append(out, f.patternProps[i].node)
			}
		}
		return out
	}
	strictNoExtras := c.opt.StrictProperties && !f.addlSet
	var slots []slot
	var taken []string // names extras must not use
	taken = append(taken, f.forbidden...)
	addSlot := func(name string, nodes []node, ptr string) (bool, error) {
		taken = append(taken, name)
		required := slices.Contains(f.required, name)
		if slices.Contains(f.forbidden, name) || (names != nil && !names.MatchString(name)) {
			return !required, nil
		}
		var v expr
		var err error
		if len(nodes) == 0 {
			v = c.anyValue()
		} else if v, err = c.compileAll(nodes, ptr); err != nil {
			return false, err
		}
		if v == nil {
			return !required, nil
		}
		slots = append(slots, slot{e: newSeq(lit(quoteJSON(name)), c.ws, lit(":"), c.ws, v), required: required})
		return true, nil
	}
	for _, p := range f.props {
		ok, err := addSlot(p.name, withPatterns(p.name, p.nodes), f.ptr+"/properties/"+escapePointer(p.name))
		if err != nil || !ok {
			return nil, err
		}
	}
	for _, name := range f.required {
		if slices.Contains(taken, name) && !slices.Contains(f.forbidden, name) {
			continue
		}
		if slices.Contains(f.forbidden, name) {
			return nil, nil
		}
		if strictNoExtras {
			return nil, nil
		}
		ok, err := addSlot(name, withPatterns(name, f.addl), f.ptr+"/required")
		if err != nil || !ok {
			return nil, err
		}
	}
	extra, err := c.extraProperties(f, pats, names, taken, strictNoExtras)
	if err != nil {
		return nil, err
	}
	body, err := c.counted(ruleName(f.ptr)+"-obj", slots, f.minProps, f.maxProps, extra)
	if err != nil || body == nil {
		return nil, err
	}
	return newSeq(lit("{"), c.ws, body, c.ws, lit("}")), nil
}

// extraProperties writes one property beyond the declared ones, or returns nil when the
// schema allows none. With patternProperties, an extra property has a key matching a
// pattern that no declared or forbidden name matches, and a value satisfying every pattern's
// schema (a key may match several); properties matching no pattern are not written.
// Without, its key is any name not taken and its value satisfies additionalProperties.
func (c *compiler) extraProperties(f *flat, pats []*regexp.Regexp, names *regexp.Regexp, taken []string, strictNoExtras bool) (expr, error) {
	kv := func(key, value expr) expr { return newSeq(key, c.ws, lit(":"), c.ws, value) }
	if len(pats) > 0 {
		var all []node
		for _, p := range f.patternProps {
			all = append(all, p.node)
		}
		if f.mergedPatterns {
			// A key matching one side's pattern may fall to the other side's
			// additionalProperties: require those too.
			all = append(all, f.addl...)
		}
		value, err := c.compileAll(all, f.ptr+"/patternProperties")
		if err != nil || value == nil {
			return nil, err
		}
		var choices []expr
		for i, re := range pats {
			if slices.ContainsFunc(taken, re.MatchString) {
				continue
			}
			key, err := patternString(f.patternProps[i].re, -1, f.patternProps[i].node.ptr)
			if err != nil {
				return nil, err
			}
			choices = append(choices, kv(key, value))
		}
		return newAlt(choices...), nil
	}
	if strictNoExtras {
		return nil, nil
	}
	value := c.anyValue()
	if len(f.addl) > 0 {
		var err error
		if value, err = c.compileAll(f.addl, f.ptr+"/additionalProperties"); err != nil || value == nil {
			return nil, err
		}
	}
	if names != nil {
		// Keys the propertyNames pattern writes, when no taken name is among them.
		if slices.ContainsFunc(taken, names.MatchString) {
			return nil, nil
		}
		p := f.namePatterns[0]
		key, err := patternString(p.v.(string), -1, p.ptr)
		if err != nil {
			return nil, err
		}
		return kv(key, value), nil
	}
	return kv(keyExcept(taken), value), nil
}

// namePattern returns the propertyNames pattern every key must match (nil: none).
func (c *compiler) namePattern(f *flat, withPatternProperties bool) (*regexp.Regexp, error) {
	if len(f.namePatterns) == 0 {
		return nil, nil
	}
	p := f.namePatterns[0]
	for _, q := range f.namePatterns[1:] {
		if q.v != p.v {
			return nil, schemaError(q.ptr, "more than one propertyNames pattern on one object is not supported")
		}
	}
	if withPatternProperties {
		return nil, schemaError(p.ptr, "propertyNames beside patternProperties is not supported")
	}
	if _, err := parsePattern(p.v.(string), p.ptr); err != nil {
		return nil, err
	}
	re, err := regexp.Compile(p.v.(string))
	if err != nil {
		return nil, schemaError(p.ptr, "pattern %q: %v", p.v, err)
	}
	return re, nil
}

// keyExcept writes a JSON string of printable ASCII characters, without escapes, that is
// none of names: a walk down the trie of the names that leaves it as soon as the key differs
// from all of them. (Keeping extra keys to ASCII keeps the grammar's automata small.)
func keyExcept(names []string) expr {
	type trie struct {
		end      bool
		children map[rune]*trie
	}
	root := &trie{children: map[rune]*trie{}}
	for _, n := range names {
		t := root
		for _, r := range n {
			next := t.children[r]
			if next == nil {
				next = &trie{children: map[rune]*trie{}}
				t.children[r] = next
			}
			t = next
		}
		t.end = true
	}
	anyChars := rep{e: keyChar(nil), min: 0, max: -1}
	var walk func(t *trie) expr
	walk = func(t *trie) expr {
		var choices []expr
		if !t.end {
			choices = append(choices, empty)
		}
		var rs []rune
		for r := range t.children {
			rs = append(rs, r)
		}
		slices.Sort(rs)
		if c := keyChar(rs); len(c.ranges) > 0 {
			choices = append(choices, newSeq(c, anyChars))
		}
		for _, r := range rs {
			choices = append(choices, newSeq(lit(string(r)), walk(t.children[r])))
		}
		return newAlt(choices...)
	}
	return newSeq(lit(`"`), walk(root), lit(`"`))
}

// keyChar matches one printable ASCII character other than '"', '\' and those in except.
func keyChar(except []rune) class {
	var c class
	for r := rune(0x20); r < 0x7f; r++ {
		if r == '"' || r == '\\' || slices.Contains(except, r) {
			continue
		}
		if n := len(c.ranges); n > 0 && c.ranges[n-1].hi == r-1 {
			c.ranges[n-1].hi = r
		} else {
			c.ranges = append(c.ranges, runeRange{r, r})
		}
	}
	return c
}

// plainChar matches one character a JSON string may hold unescaped, other than those in
// except.
func plainChar(except []rune) class {
	c := class{negated: true, ranges: []runeRange{{0, 0x1f}, {'"', '"'}, {'\\', '\\'}}}
	for _, r := range except {
		if r > 0x1f && r != '"' && r != '\\' {
			c.ranges = append(c.ranges, runeRange{r, r})
		}
	}
	return c
}

// compileArray writes the arrays an alternative admits.
func (c *compiler) compileArray(f *flat) (expr, error) {
	base := ruleName(f.ptr) + "-arr"
	var items expr
	if len(f.items) == 0 {
		items = c.anyValue()
	} else {
		var err error
		if items, err = c.compileAll(f.items, f.ptr+"/items"); err != nil {
			return nil, err
		}
	}
	if len(f.contains) > 0 {
		return c.containingArray(f, items)
	}
	if f.unique && f.maxItems != 0 && f.maxItems != 1 {
		if literals(items) == nil && len(f.prefix) == 0 && f.minItems <= 1 {
			// Items that are not a finite list: at most one, which is always unique.
			g := *f
			g.maxItems, g.unique = 1, false
			return c.compileArray(&g)
		}
		return c.uniqueArray(f, items, base)
	}
	prefix := make([]expr, len(f.prefix))
	for i, nodes := range f.prefix {
		e, err := c.compileAll(nodes, f.ptr+"/prefixItems/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		prefix[i] = e
	}
	sep := newSeq(c.ws, lit(","), c.ws)
	// body(i) writes elements i, i+1, ... given that i elements came before.
	var body func(i int) expr
	body = func(i int) expr {
		if i < len(prefix) {
			var choices []expr
			if i >= f.minItems {
				choices = append(choices, empty)
			}
			if (f.maxItems < 0 || i < f.maxItems) && prefix[i] != nil {
				if rest := body(i + 1); rest != nil {
					var s expr = empty
					if i > 0 {
						s = sep
					}
					choices = append(choices, newSeq(s, prefix[i], rest))
				}
			}
			return newAlt(choices...)
		}
		lo, hi := max(f.minItems-i, 0), -1
		if f.maxItems >= 0 {
			hi = f.maxItems - i
		}
		if items == nil || hi == 0 {
			if lo == 0 {
				return empty
			}
			return nil
		}
		if i > 0 {
			return rep{e: newSeq(sep, items), min: lo, max: hi}
		}
		rest := rep{e: newSeq(sep, items), min: max(lo-1, 0), max: max(hi-1, -1)}
		first := newSeq(items, rest)
		if hi == 1 {
			first = items
		}
		if lo == 0 {
			return opt(first)
		}
		return first
	}
	b := body(0)
	if b == nil {
		return nil, nil
	}
	return newSeq(lit("["), c.ws, b, c.ws, lit("]")), nil
}

// containingArray writes arrays with contains: one element satisfies the contains schema
// (and items) anywhere among elements satisfying items; with minItems above 1 or maxItems,
// that element comes first.
func (c *compiler) containingArray(f *flat, items expr) (expr, error) {
	if len(f.contains) > 1 || len(f.prefix) > 0 || f.unique {
		return nil, schemaError(f.contains[0].ptr, "contains beside prefixItems or uniqueItems, or several contains on one array, is not supported")
	}
	if f.maxItems == 0 || items == nil {
		return nil, nil
	}
	wanted, err := c.compileAll(append(append([]node{}, f.items...), f.contains[0]), f.contains[0].ptr)
	if err != nil || wanted == nil {
		return nil, err
	}
	sep := newSeq(c.ws, lit(","), c.ws)
	var body expr
	if f.minItems <= 1 && f.maxItems < 0 {
		body = newSeq(rep{e: newSeq(items, sep), min: 0, max: -1}, wanted, rep{e: newSeq(sep, items), min: 0, max: -1})
	} else {
		hi := -1
		if f.maxItems > 0 {
			hi = f.maxItems - 1
		}
		body = newSeq(wanted, repeat(newSeq(sep, items), max(f.minItems-1, 0), hi))
	}
	return newSeq(lit("["), c.ws, body, c.ws, lit("]")), nil
}

// uniqueArray writes arrays with uniqueItems where the grammar can decide it: when the
// items are a finite list of values (an enum, a const, booleans), an array takes each value
// at most once, in the list's order.
func (c *compiler) uniqueArray(f *flat, items expr, base string) (expr, error) {
	vals := literals(items)
	if vals == nil || len(f.prefix) > 0 {
		return nil, schemaError(f.ptr+"/uniqueItems", "keyword \"uniqueItems\" is supported only for items that are a finite list of values (enum, const, boolean), or with minItems at most 1 (then arrays hold at most one element)")
	}
	slots := make([]slot, len(vals))
	for i, v := range vals {
		slots[i] = slot{e: v}
	}
	body, err := c.counted(base+"-unique", slots, f.minItems, f.maxItems, nil)
	if err != nil || body == nil {
		return nil, err
	}
	return newSeq(lit("["), c.ws, body, c.ws, lit("]")), nil
}

// literals returns the values of a choice of literals, or nil when e is anything else.
func literals(e expr) []expr {
	switch e := e.(type) {
	case lit:
		return []expr{e}
	case alt:
		for _, x := range e {
			if _, ok := x.(lit); !ok {
				if ls := literals(x); ls == nil {
					return nil
				}
			}
		}
		var out []expr
		for _, x := range e {
			out = append(out, literals(x)...)
		}
		return out
	}
	return nil
}
