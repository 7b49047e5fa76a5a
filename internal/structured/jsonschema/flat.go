package jsonschema

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// node is one schema (an object or a boolean) and the JSON pointer where it sits.
type node struct {
	v   any
	ptr string
}

// typeSet is a set of JSON types; number includes the integers, so "number" is
// tNumber|tInteger and "integer" is tInteger.
type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBoolean
	tObject
	tArray
	tString
	tNumber // the non-integral numbers
	tInteger
	tAll = tNull | tBoolean | tObject | tArray | tString | tNumber | tInteger
)

// bound is one numeric bound; excl makes it strict.
type bound struct {
	v    float64
	excl bool
	set  bool
}

// prop is a named property of a flattened object schema: its value must satisfy every
// schema in nodes (none means any value).
type prop struct {
	name  string
	nodes []node
}

// pattern is one patternProperties entry.
type pattern struct {
	re   string
	node node
}

// flat is the conjunction of a set of schemas with the applicators allOf, anyOf, oneOf, not
// and $ref taken apart: one alternative of a schema, every keyword merged into one value per
// constraint. The compiler writes a grammar for each flat alternative.
type flat struct {
	ptr   string // where the alternative starts, for errors
	types typeSet

	hasEnum  bool
	enum     []any
	excluded []any // values a "not" with enum or const rules out

	// Strings.
	minLen, maxLen int // maxLen < 0: none
	patterns       []node
	formats        []string

	// Numbers.
	lo, hi     bound
	multipleOf []float64

	// Arrays: element i must satisfy prefix[i] (when i < len(prefix)) or items.
	prefix             [][]node
	items              []node
	minItems, maxItems int
	unique             bool
	contains           []node // an element must satisfy these (and items)

	// Objects.
	shaped             bool // properties, patternProperties or additionalProperties seen
	props              []*prop
	patternProps       []pattern
	mergedPatterns     bool   // patternProperties from several schemas: extras also obey addl
	addl               []node // additionalProperties schemas; none: any
	addlSet            bool
	required           []string
	forbidden          []string
	namePatterns       []node // propertyNames patterns every key must match
	minProps, maxProps int    // maxProps < 0: none
}

func newFlat(ptr string) *flat {
	return &flat{ptr: ptr, types: tAll, maxLen: -1, maxItems: -1, maxProps: -1}
}

// clone copies f deeply enough that changing the copy leaves f alone.
func (f *flat) clone() *flat {
	g := *f
	g.enum = slices.Clone(f.enum)
	g.excluded = slices.Clone(f.excluded)
	g.contains = slices.Clone(f.contains)
	g.patterns = slices.Clone(f.patterns)
	g.formats = slices.Clone(f.formats)
	g.multipleOf = slices.Clone(f.multipleOf)
	g.prefix = make([][]node, len(f.prefix))
	for i, p := range f.prefix {
		g.prefix[i] = slices.Clone(p)
	}
	g.items = slices.Clone(f.items)
	g.props = make([]*prop, len(f.props))
	for i, p := range f.props {
		g.props[i] = &prop{name: p.name, nodes: slices.Clone(p.nodes)}
	}
	g.patternProps = slices.Clone(f.patternProps)
	g.addl = slices.Clone(f.addl)
	g.required = slices.Clone(f.required)
	g.forbidden = slices.Clone(f.forbidden)
	g.namePatterns = slices.Clone(f.namePatterns)
	return &g
}

// schemaError is a refusal or a malformed schema, naming the keyword's JSON pointer.
func schemaError(ptr, format string, args ...any) error {
	if ptr == "" {
		ptr = "#"
	} else {
		ptr = "#" + ptr
	}
	return fmt.Errorf("json schema %s: %s", ptr, fmt.Sprintf(format, args...))
}

// maxAlternatives caps how many alternatives anyOf/oneOf/dependencies may multiply into.
const maxAlternatives = 256

// maxInlineDepth caps how deep allOf and $ref may nest inside one alternative.
const maxInlineDepth = 64

// flatten takes the conjunction of nodes apart into its alternatives.
func (c *compiler) flatten(nodes []node, ptr string) ([]*flat, error) {
	fs := []*flat{newFlat(ptr)}
	for _, n := range nodes {
		var next []*flat
		for _, f := range fs {
			out, err := c.apply(f, n, 0)
			if err != nil {
				return nil, err
			}
			next = append(next, out...)
		}
		fs = next
		if len(fs) > maxAlternatives {
			return nil, schemaError(n.ptr, "anyOf/oneOf/dependencies combine into more than %d alternatives", maxAlternatives)
		}
	}
	return fs, nil
}

// apply adds schema n to alternative f (which it may change) and returns the resulting
// alternatives: none when n admits nothing, several when n holds a choice.
func (c *compiler) apply(f *flat, n node, depth int) ([]*flat, error) {
	if depth > maxInlineDepth {
		return nil, schemaError(n.ptr, "allOf/$ref nest deeper than %d levels (a cycle?)", maxInlineDepth)
	}
	switch v := n.v.(type) {
	case bool:
		if v {
			return []*flat{f}, nil
		}
		return nil, nil
	case *object:
		return c.applyObject(f, v, n.ptr, depth)
	}
	return nil, schemaError(n.ptr, "a schema must be an object or a boolean, not %s", jsonKind(n.v))
}

func (c *compiler) applyObject(f *flat, o *object, ptr string, depth int) ([]*flat, error) {
	if err := checkKeywords(o, ptr); err != nil {
		return nil, err
	}
	fs := []*flat{f}
	// Draft 7 and earlier ignore every keyword beside $ref.
	if r, ok := o.get("$ref"); ok {
		target, err := c.resolve(r, ptr+"/$ref")
		if err != nil {
			return nil, err
		}
		out, err := c.apply(f, target, depth+1)
		if err != nil || c.refOverrides {
			return out, err
		}
		fs = out
	}
	for _, f := range fs {
		if err := applyLocal(f, o, ptr); err != nil {
			return nil, err
		}
	}
	var err error
	if v, ok := o.get("allOf"); ok {
		subs, err := schemaList(v, ptr+"/allOf")
		if err != nil {
			return nil, err
		}
		for _, s := range subs {
			if fs, err = c.applyAll(fs, s, depth); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if v, ok := o.get(k); ok {
			subs, err := schemaList(v, ptr+"/"+k)
			if err != nil {
				return nil, err
			}
			var next []*flat
			for _, f := range fs {
				branches := make([][]*flat, len(subs))
				for i, s := range subs {
					if branches[i], err = c.apply(f.clone(), s, depth+1); err != nil {
						return nil, err
					}
				}
				if k == "oneOf" {
					onlyRequired := make([]bool, len(subs))
					for i, s := range subs {
						onlyRequired[i] = onlyRequiredList(s)
					}
					only, err := c.exclusive(branches, onlyRequired, ptr+"/oneOf")
					if err != nil {
						return nil, err
					}
					branches = [][]*flat{only}
				}
				for _, b := range branches {
					next = append(next, b...)
				}
			}
			if len(next) > maxAlternatives {
				return nil, schemaError(ptr+"/"+k, "combines into more than %d alternatives", maxAlternatives)
			}
			fs = next
		}
	}
	if v, ok := o.get("not"); ok {
		if fs, err = c.applyNot(fs, node{v, ptr + "/not"}); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"dependencies", "dependentRequired", "dependentSchemas"} {
		if v, ok := o.get(k); ok {
			if fs, err = c.applyDependencies(fs, v, ptr+"/"+k, depth); err != nil {
				return nil, err
			}
		}
	}
	return fs, nil
}

// applyAll adds s to every alternative in fs.
func (c *compiler) applyAll(fs []*flat, s node, depth int) ([]*flat, error) {
	var next []*flat
	for _, f := range fs {
		out, err := c.apply(f, s, depth+1)
		if err != nil {
			return nil, err
		}
		next = append(next, out...)
	}
	if len(next) > maxAlternatives {
		return nil, schemaError(s.ptr, "combines into more than %d alternatives", maxAlternatives)
	}
	return next, nil
}

// checkKeywords refuses a schema object that uses a keyword the grammar cannot enforce.
func checkKeywords(o *object, ptr string) error {
	for _, k := range o.keys {
		if classify(k) == unsupported {
			return schemaError(ptr+"/"+escapePointer(k), "keyword %q is not supported", k)
		}
	}
	return nil
}

// applyLocal merges the keywords of o that constrain a single value into f.
func applyLocal(f *flat, o *object, ptr string) error {
	at := func(k string) string { return ptr + "/" + escapePointer(k) }
	if v, ok := o.get("type"); ok {
		t, err := parseTypes(v, at("type"))
		if err != nil {
			return err
		}
		if nb, ok := o.get("nullable"); ok && nb == true {
			t |= tNull
		}
		f.types &= t
	}
	if v, ok := o.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok {
			return schemaError(at("enum"), "enum must be an array")
		}
		f.restrictEnum(vals)
	}
	if v, ok := o.get("const"); ok {
		f.restrictEnum([]any{v})
	}
	// Strings.
	if err := countBounds(o, "minLength", "maxLength", at, &f.minLen, &f.maxLen); err != nil {
		return err
	}
	if v, ok := o.get("pattern"); ok {
		if _, ok := v.(string); !ok {
			return schemaError(at("pattern"), "pattern must be a string")
		}
		f.patterns = append(f.patterns, node{v, at("pattern")})
	}
	if v, ok := o.get("format"); ok {
		s, ok := v.(string)
		if !ok {
			return schemaError(at("format"), "format must be a string")
		}
		if refusedFormat(s) {
			return schemaError(at("format"), "format %q is not supported", s)
		}
		if knownFormat(s) && !slices.Contains(f.formats, s) {
			f.formats = append(f.formats, s)
		}
	}
	// Numbers.
	if err := applyBounds(f, o, at); err != nil {
		return err
	}
	if v, ok := o.get("multipleOf"); ok {
		m, err := number(v, at("multipleOf"))
		if err != nil {
			return err
		}
		if m <= 0 {
			return schemaError(at("multipleOf"), "multipleOf must be greater than 0")
		}
		f.multipleOf = append(f.multipleOf, m)
	}
	// Arrays.
	if err := applyArray(f, o, at); err != nil {
		return err
	}
	// Objects.
	return applyObjectShape(f, o, at)
}

// restrictEnum keeps only the enum values that are also in vals.
func (f *flat) restrictEnum(vals []any) {
	if !f.hasEnum {
		f.hasEnum, f.enum = true, slices.Clone(vals)
		return
	}
	f.enum = slices.DeleteFunc(f.enum, func(e any) bool {
		return !slices.ContainsFunc(vals, func(v any) bool { return equalJSON(e, v) })
	})
}

func applyBounds(f *flat, o *object, at func(string) string) error {
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		v, ok := o.get(k)
		if !ok {
			continue
		}
		if b, isBool := v.(bool); isBool {
			// Draft 4: a boolean exclusiveMinimum/Maximum makes minimum/maximum strict.
			base := map[string]string{"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}[k]
			bv, has := o.get(base)
			if base == "" || !b || !has {
				if base == "" {
					return schemaError(at(k), "%s must be a number", k)
				}
				continue
			}
			x, err := number(bv, at(base))
			if err != nil {
				return err
			}
			f.tighten(base == "minimum", bound{v: x, excl: true, set: true})
			continue
		}
		x, err := number(v, at(k))
		if err != nil {
			return err
		}
		f.tighten(k == "minimum" || k == "exclusiveMinimum", bound{v: x, excl: strings.HasPrefix(k, "exclusive"), set: true})
	}
	return nil
}

// tighten keeps the stricter of the current bound and b.
func (f *flat) tighten(lower bool, b bound) {
	cur := &f.hi
	if lower {
		cur = &f.lo
	}
	switch {
	case !cur.set:
		*cur = b
	case b.v == cur.v:
		cur.excl = cur.excl || b.excl
	case lower == (b.v > cur.v):
		*cur = b
	}
}

func applyArray(f *flat, o *object, at func(string) string) error {
	var prefix []node
	var items []node
	hasItems := false
	if v, ok := o.get("prefixItems"); ok {
		subs, err := schemaList(v, at("prefixItems"))
		if err != nil {
			return err
		}
		prefix = subs
	}
	if v, ok := o.get("items"); ok {
		if _, isList := v.([]any); isList {
			// Draft 7's tuple form; additionalItems then governs the rest.
			subs, err := schemaList(v, at("items"))
			if err != nil {
				return err
			}
			prefix = subs
			if a, ok := o.get("additionalItems"); ok {
				items, hasItems = []node{{a, at("additionalItems")}}, true
			}
		} else {
			items, hasItems = []node{{v, at("items")}}, true
		}
	}
	if len(prefix) > 0 || hasItems {
		// Element i must satisfy what both f and o say about position i.
		oldAt := func(i int) []node {
			if i < len(f.prefix) {
				return f.prefix[i]
			}
			return f.items
		}
		n := max(len(prefix), len(f.prefix))
		merged := make([][]node, n)
		for i := range n {
			merged[i] = slices.Clone(oldAt(i))
			if i < len(prefix) {
				merged[i] = append(merged[i], prefix[i])
			} else {
				merged[i] = append(merged[i], items...)
			}
		}
		f.prefix = merged
		f.items = append(slices.Clone(f.items), items...)
	}
	if err := countBounds(o, "minItems", "maxItems", at, &f.minItems, &f.maxItems); err != nil {
		return err
	}
	if v, ok := o.get("contains"); ok {
		minC := 1
		if m, ok := o.get("minContains"); ok {
			n, err := count(m, at("minContains"))
			if err != nil {
				return err
			}
			minC = n
		}
		switch _, hasMax := o.get("maxContains"); {
		case hasMax:
			return schemaError(at("maxContains"), "keyword \"maxContains\" is not supported")
		case minC > 1:
			return schemaError(at("minContains"), "minContains above 1 is not supported")
		case minC == 1:
			f.contains = append(f.contains, node{v, at("contains")})
		}
	}
	if v, ok := o.get("uniqueItems"); ok {
		b, ok := v.(bool)
		if !ok {
			return schemaError(at("uniqueItems"), "uniqueItems must be a boolean")
		}
		f.unique = f.unique || b
	}
	return nil
}

func applyObjectShape(f *flat, o *object, at func(string) string) error {
	var props []*prop
	var pats []pattern
	var addl []node
	_, hasProps := o.get("properties")
	_, hasPats := o.get("patternProperties")
	addlV, hasAddl := o.get("additionalProperties")
	if v, ok := o.get("properties"); ok {
		po, ok := v.(*object)
		if !ok {
			return schemaError(at("properties"), "properties must be an object")
		}
		for _, k := range po.keys {
			props = append(props, &prop{name: k, nodes: []node{{po.vals[k], at("properties") + "/" + escapePointer(k)}}})
		}
	}
	if v, ok := o.get("patternProperties"); ok {
		po, ok := v.(*object)
		if !ok {
			return schemaError(at("patternProperties"), "patternProperties must be an object")
		}
		for _, k := range po.keys {
			pats = append(pats, pattern{re: k, node: node{po.vals[k], at("patternProperties") + "/" + escapePointer(k)}})
		}
	}
	if hasAddl {
		addl = []node{{addlV, at("additionalProperties")}}
	}
	if hasProps || hasPats || hasAddl {
		if err := f.mergeShape(props, pats, addl, hasAddl, at("properties")); err != nil {
			return err
		}
	}
	if v, ok := o.get("required"); ok {
		names, err := stringList(v, at("required"))
		if err != nil {
			return err
		}
		for _, n := range names {
			if !slices.Contains(f.required, n) {
				f.required = append(f.required, n)
			}
		}
	}
	if err := countBounds(o, "minProperties", "maxProperties", at, &f.minProps, &f.maxProps); err != nil {
		return err
	}
	if v, ok := o.get("propertyNames"); ok {
		return applyPropertyNames(f, v, at("propertyNames"))
	}
	return nil
}

// applyPropertyNames reads propertyNames: true, false (no keys), or a schema whose one
// enforced keyword is pattern.
func applyPropertyNames(f *flat, v any, ptr string) error {
	switch v := v.(type) {
	case bool:
		if !v {
			f.maxProps = 0
		}
		return nil
	case *object:
		for _, k := range v.keys {
			if k != "pattern" && (classify(k) == supported || classify(k) == unsupported) {
				return schemaError(ptr+"/"+escapePointer(k), "propertyNames is supported only with pattern, not %q", k)
			}
		}
		if p, ok := v.get("pattern"); ok {
			if _, ok := p.(string); !ok {
				return schemaError(ptr+"/pattern", "pattern must be a string")
			}
			f.namePatterns = append(f.namePatterns, node{p, ptr + "/pattern"})
		}
		return nil
	}
	return schemaError(ptr, "a schema must be an object or a boolean, not %s", jsonKind(v))
}

// mergeShape adds one schema's properties/patternProperties/additionalProperties to f: a key
// must then satisfy what f says about it and what the new schema says about it.
func (f *flat) mergeShape(props []*prop, pats []pattern, addl []node, hasAddl bool, ptr string) error {
	if !f.shaped {
		f.shaped, f.props, f.patternProps, f.addl, f.addlSet = true, props, pats, addl, hasAddl
		return nil
	}
	// sub returns what one side says about a key it does not declare: the schemas of the
	// patterns the key matches, or additionalProperties when it matches none.
	sub := func(name string, pats []pattern, addl []node) ([]node, error) {
		var out []node
		for _, p := range pats {
			re, err := regexp.Compile(p.re)
			if err != nil {
				return nil, schemaError(p.node.ptr, "patternProperties pattern %q: %v", p.re, err)
			}
			if re.MatchString(name) {
				out = append(out, p.node)
			}
		}
		if len(out) == 0 {
			out = addl
		}
		return out, nil
	}
	newByName := map[string]*prop{}
	for _, p := range props {
		newByName[p.name] = p
	}
	for _, p := range f.props {
		if q, ok := newByName[p.name]; ok {
			p.nodes = append(p.nodes, q.nodes...)
			continue
		}
		extra, err := sub(p.name, pats, addl)
		if err != nil {
			return err
		}
		p.nodes = append(p.nodes, extra...)
	}
	for _, q := range props {
		if !slices.ContainsFunc(f.props, func(p *prop) bool { return p.name == q.name }) {
			extra, err := sub(q.name, f.patternProps, f.addl)
			if err != nil {
				return err
			}
			f.props = append(f.props, &prop{name: q.name, nodes: append(slices.Clone(extra), q.nodes...)})
		}
	}
	if len(pats) > 0 || len(f.patternProps) > 0 {
		f.mergedPatterns = true
	}
	f.patternProps = append(f.patternProps, pats...)
	f.addl = append(f.addl, addl...)
	f.addlSet = f.addlSet || hasAddl
	return nil
}

// applyNot handles the forms of "not" whose complement the grammar can write: a boolean,
// {} (nothing), a list of types, and {"required": [...]} (one of those properties absent).
func (c *compiler) applyNot(fs []*flat, n node) ([]*flat, error) {
	switch v := n.v.(type) {
	case bool:
		if v {
			return nil, nil
		}
		return fs, nil
	case *object:
		var ks []string
		for _, k := range v.keys {
			if classify(k) == supported || classify(k) == unsupported {
				ks = append(ks, k)
			}
		}
		switch {
		case len(ks) == 0:
			return nil, nil // not {} admits nothing
		case len(ks) == 1 && ks[0] == "type":
			t, err := parseTypes(v.vals["type"], n.ptr+"/type")
			if err != nil {
				return nil, err
			}
			for _, f := range fs {
				f.types &^= t
			}
			return fs, nil
		case len(ks) == 1 && (ks[0] == "enum" || ks[0] == "const"):
			vals := []any{v.vals["const"]}
			if ks[0] == "enum" {
				list, ok := v.vals["enum"].([]any)
				if !ok {
					return nil, schemaError(n.ptr+"/enum", "enum must be an array")
				}
				vals = list
			}
			for _, f := range fs {
				f.excluded = append(f.excluded, vals...)
				if containsValue(vals, nil) {
					f.types &^= tNull
				}
			}
			return fs, nil
		case len(ks) == 1 && ks[0] == "required":
			names, err := stringList(v.vals["required"], n.ptr+"/required")
			if err != nil {
				return nil, err
			}
			if len(names) == 0 {
				return nil, nil
			}
			var out []*flat
			for _, f := range fs {
				// Not an object, or an object missing one of the names.
				if f.types&^tObject != 0 {
					g := f.clone()
					g.types &^= tObject
					out = append(out, g)
				}
				if f.types&tObject == 0 {
					continue
				}
				for _, name := range names {
					g := f.clone()
					g.types &= tObject
					g.forbidden = append(g.forbidden, name)
					out = append(out, g)
				}
			}
			return out, nil
		}
		return nil, schemaError(n.ptr, "keyword \"not\" is supported only with {}, a type list, an enum or const, or a required list")
	}
	return nil, schemaError(n.ptr, "a schema must be an object or a boolean, not %s", jsonKind(n.v))
}

// applyDependencies writes "if property A is present then ..." as two alternatives: A absent,
// or A present together with what it requires.
func (c *compiler) applyDependencies(fs []*flat, v any, ptr string, depth int) ([]*flat, error) {
	deps, ok := v.(*object)
	if !ok {
		return nil, schemaError(ptr, "must be an object")
	}
	for _, name := range deps.keys {
		at := ptr + "/" + escapePointer(name)
		dep := deps.vals[name]
		var next []*flat
		for _, f := range fs {
			if f.types&tObject == 0 {
				next = append(next, f)
				continue
			}
			if f.types&^tObject != 0 {
				g := f.clone()
				g.types &^= tObject
				next = append(next, g)
			}
			absent := f.clone()
			absent.types &= tObject
			absent.forbidden = append(absent.forbidden, name)
			next = append(next, absent)
			present := f.clone()
			present.types &= tObject
			if !slices.Contains(present.required, name) {
				present.required = append(present.required, name)
			}
			if names, err := stringList(dep, at); err == nil {
				for _, n := range names {
					if !slices.Contains(present.required, n) {
						present.required = append(present.required, n)
					}
				}
				next = append(next, present)
				continue
			}
			out, err := c.apply(present, node{dep, at}, depth+1)
			if err != nil {
				return nil, err
			}
			next = append(next, out...)
		}
		if len(next) > maxAlternatives {
			return nil, schemaError(at, "dependencies combine into more than %d alternatives", maxAlternatives)
		}
		fs = next
	}
	return fs, nil
}

// parseTypes reads "type": a type name or a list of them.
func parseTypes(v any, ptr string) (typeSet, error) {
	one := func(s any) (typeSet, error) {
		switch s {
		case "null":
			return tNull, nil
		case "boolean":
			return tBoolean, nil
		case "object":
			return tObject, nil
		case "array":
			return tArray, nil
		case "string":
			return tString, nil
		case "number":
			return tNumber | tInteger, nil
		case "integer":
			return tInteger, nil
		}
		return 0, schemaError(ptr, "unknown type %v", s)
	}
	if list, ok := v.([]any); ok {
		var t typeSet
		for _, s := range list {
			x, err := one(s)
			if err != nil {
				return 0, err
			}
			t |= x
		}
		return t, nil
	}
	return one(v)
}

// schemaList reads an array of schemas.
func schemaList(v any, ptr string) ([]node, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, schemaError(ptr, "must be an array of schemas")
	}
	out := make([]node, len(list))
	for i, s := range list {
		out[i] = node{s, ptr + "/" + strconv.Itoa(i)}
	}
	return out, nil
}

// stringList reads an array of strings.
func stringList(v any, ptr string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, schemaError(ptr, "must be an array of strings")
	}
	out := make([]string, len(list))
	for i, s := range list {
		str, ok := s.(string)
		if !ok {
			return nil, schemaError(ptr, "must be an array of strings")
		}
		out[i] = str
	}
	return out, nil
}

// countBounds tightens lo and hi (hi < 0: none) by the count keywords minKey and maxKey.
func countBounds(o *object, minKey, maxKey string, at func(string) string, lo, hi *int) error {
	if v, ok := o.get(minKey); ok {
		n, err := count(v, at(minKey))
		if err != nil {
			return err
		}
		*lo = max(*lo, n)
	}
	if v, ok := o.get(maxKey); ok {
		n, err := count(v, at(maxKey))
		if err != nil {
			return err
		}
		*hi = minBound(*hi, n)
	}
	return nil
}

// maxCount bounds the counts (lengths, item and property counts) the compiler accepts.
const maxCount = 1 << 20

// count reads a non-negative integer keyword.
func count(v any, ptr string) (int, error) {
	x, err := number(v, ptr)
	if err != nil {
		return 0, err
	}
	if x < 0 || x != math.Trunc(x) {
		return 0, schemaError(ptr, "must be a non-negative integer")
	}
	if x > maxCount {
		return maxCount, nil
	}
	return int(x), nil
}

// number reads a numeric keyword.
func number(v any, ptr string) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, schemaError(ptr, "must be a number")
	}
	x, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(x, 0) {
		return 0, schemaError(ptr, "number %s is out of range", n)
	}
	return x, nil
}

// minBound is the smaller of two upper bounds, where a negative one means none.
func minBound(cur, n int) int {
	if cur < 0 {
		return n
	}
	return min(cur, n)
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}
