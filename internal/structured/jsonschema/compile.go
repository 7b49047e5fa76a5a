package jsonschema

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/structured"
)

// Options configure ToGBNF.
type Options struct {
	// WhitespacePattern is a regular expression for the whitespace allowed between JSON
	// tokens (after "{", "[", ",", ":" and before "}", "]"). It must match only JSON
	// whitespace (space, tab, newline, carriage return) and only strings of bounded length,
	// such as `[ \t\n]{0,20}`, so that no output can loop on whitespace. Empty means no
	// whitespace at all (compact JSON).
	WhitespacePattern string
	// StrictProperties treats a missing additionalProperties as false, as OpenAI's strict
	// mode and llama.cpp do; by default (as JSON Schema says) an object may then carry
	// further properties after the declared ones.
	StrictProperties bool
	// Start names the start rule ("": root), so that the grammar can be a part of a larger
	// one (a tool call's wrapper text around its arguments): no other rule takes the name.
	Start string
	// RulePrefix begins the name of every rule but the start rule, so that the grammars
	// of several schemas can be joined into one without their rules meeting.
	RulePrefix string
	// Pointer is the JSON pointer (such as "/properties/city") of the schema to compile
	// within the document; "" is the whole document. $ref resolves against the whole
	// document either way.
	Pointer string
}

// start returns the start rule's name.
func (o Options) start() string {
	if o.Start == "" {
		return "root"
	}
	return o.Start
}

// compiler holds the state of one schema's compilation.
type compiler struct {
	opt          Options
	root         any
	refOverrides bool // draft 7 and earlier: $ref ignores its siblings
	ws           expr
	g            grammar
	memo         map[string]*memoEntry
	counter      int
	depth        int
}

// memoEntry tracks one conjunction of schemas being or having been compiled.
type memoEntry struct {
	done, inProgress bool
	name             string // the rule, when the body became one
	body             expr
}

// maxCompileDepth caps how deep schemas nest inside one another in the grammar.
const maxCompileDepth = 200

// ToGBNF compiles a JSON Schema document into a GBNF grammar (llama.cpp's dialect) whose
// start rule ("root", or opt.Start) matches the JSON texts that the schema accepts, in the
// form the grammar writes them: properties in the schema's order, whitespace as opt allows. A schema using a
// keyword the grammar cannot enforce is refused with an error naming the keyword and its
// JSON pointer.
func ToGBNF(schema []byte, opt Options) (string, error) {
	g, err := compileSchema(schema, opt)
	if err != nil {
		return "", err
	}
	return g.writeGBNF(), nil
}

// FrontEnd returns the structured-output front end of JSON Schema documents compiled with
// opt: ToGBNF, then the GBNF parser.
func FrontEnd(opt Options) structured.FrontEnd {
	return func(schema []byte) (*structured.Grammar, error) {
		gbnf, err := ToGBNF(schema, opt)
		if err != nil {
			return nil, err
		}
		return structured.ParseGBNF(gbnf)
	}
}

// compileSchema builds the grammar of a schema document.
func compileSchema(schema []byte, opt Options) (*grammar, error) {
	root, err := decodeJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	c, err := newCompiler(root, opt)
	if err != nil {
		return nil, err
	}
	c.g.names = append(c.g.names, opt.start())
	target := node{root, ""}
	if opt.Pointer != "" {
		if target, err = c.resolve("#"+opt.Pointer, ""); err != nil {
			return nil, err
		}
	}
	body, err := c.compileAll([]node{target}, target.ptr)
	if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, schemaError("", "the schema admits no value")
	}
	c.g.rules[opt.start()] = body
	if err := c.g.checkProgress(); err != nil {
		return nil, err
	}
	c.g.prune(c.opt.start())
	return &c.g, nil
}

func newCompiler(root any, opt Options) (*compiler, error) {
	c := &compiler{opt: opt, root: root, memo: map[string]*memoEntry{}, ws: empty}
	c.g.rules = map[string]expr{}
	if o, ok := root.(*object); ok {
		if s, ok := o.vals["$schema"].(string); ok {
			for _, d := range []string{"draft-03", "draft-04", "draft-06", "draft-07"} {
				if strings.Contains(s, d) {
					c.refOverrides = true
				}
			}
		}
	}
	if opt.WhitespacePattern != "" {
		ws, err := whitespaceExpr(opt.WhitespacePattern)
		if err != nil {
			return nil, err
		}
		c.ws = c.define("ws", ws)
	}
	return c, nil
}

// define adds a rule named after base (made unique) and returns a reference to it.
func (c *compiler) define(base string, body expr) expr {
	name := c.newName(base)
	c.g.rules[name] = body
	return ref(name)
}

// newName reserves a rule name derived from base.
func (c *compiler) newName(base string) string {
	base = c.opt.RulePrefix + base
	name := base
	for {
		if _, taken := c.g.rules[name]; !taken && name != c.opt.start() {
			break
		}
		c.counter++
		name = base + "-" + strconv.Itoa(c.counter)
	}
	c.g.rules[name] = nil // reserved until its body is known
	c.g.names = append(c.g.names, name)
	return name
}

// compileAll returns the grammar of the values that satisfy every schema in nodes, or nil
// when none does. A lone $ref becomes a reference to its target's rule; a conjunction met
// again while it is being compiled (recursion) becomes a rule of its own.
func (c *compiler) compileAll(nodes []node, ptr string) (expr, error) {
	// The same schema twice in a conjunction says nothing more.
	for i := 0; i < len(nodes); i++ {
		for j := len(nodes) - 1; j > i; j-- {
			if nodes[j].ptr == nodes[i].ptr {
				nodes = slices.Delete(nodes, j, j+1)
			}
		}
	}
	if len(nodes) == 1 {
		if target, ok, err := c.pureRef(nodes[0]); err != nil {
			return nil, err
		} else if ok {
			return c.refRule(target)
		}
	}
	key := memoKey(nodes)
	m := c.memo[key]
	if m != nil && m.inProgress {
		if m.name == "" {
			m.name = c.newName(ruleName(ptr))
		}
		return ref(m.name), nil
	}
	if m != nil && m.done {
		if m.name != "" {
			return ref(m.name), nil
		}
		return m.body, nil
	}
	if m == nil {
		m = &memoEntry{}
		c.memo[key] = m
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxCompileDepth {
		return nil, schemaError(ptr, "schemas nest deeper than %d levels", maxCompileDepth)
	}
	m.inProgress = true
	body, err := c.compileConjunction(nodes, ptr)
	m.inProgress = false
	if err != nil {
		return nil, err
	}
	m.done, m.body = true, body
	if m.name != "" {
		if body == nil {
			return nil, schemaError(ptr, "a recursive schema admits no value")
		}
		c.g.rules[m.name] = body
		return ref(m.name), nil
	}
	return body, nil
}

// refRule returns a reference to the rule of a $ref target, compiling it the first time.
func (c *compiler) refRule(target node) (expr, error) {
	key := "ref:" + target.ptr
	m := c.memo[key]
	if m != nil {
		if m.done && m.body == nil {
			return nil, nil
		}
		m.inProgress = m.inProgress || !m.done // referenced before its body was known
		return ref(m.name), nil
	}
	m = &memoEntry{name: c.newName(ruleName(target.ptr))}
	c.memo[key] = m
	body, err := c.compileAll([]node{target}, target.ptr)
	if err != nil {
		return nil, err
	}
	m.done, m.body = true, body
	if body == nil && m.inProgress {
		return nil, schemaError(target.ptr, "a recursive schema admits no value")
	}
	if body == nil {
		delete(c.g.rules, m.name)
		c.g.names = slices.DeleteFunc(c.g.names, func(n string) bool { return n == m.name })
		return nil, nil
	}
	c.g.rules[m.name] = body
	return ref(m.name), nil
}

func memoKey(nodes []node) string {
	ptrs := make([]string, len(nodes))
	for i, n := range nodes {
		ptrs[i] = n.ptr
	}
	return strings.Join(ptrs, "\x00")
}

// pureRef reports whether n is a schema whose only enforced keyword is $ref, and returns its
// target.
func (c *compiler) pureRef(n node) (node, bool, error) {
	o, ok := n.v.(*object)
	if !ok {
		return node{}, false, nil
	}
	r, ok := o.get("$ref")
	if !ok {
		return node{}, false, nil
	}
	if !c.refOverrides {
		for _, k := range o.keys {
			if k != "$ref" && classify(k) != annotation && classify(k) != unknownKeyword {
				return node{}, false, nil
			}
		}
	}
	target, err := c.resolve(r, n.ptr+"/$ref")
	return target, err == nil, err
}

// resolve finds the schema a $ref names: a JSON pointer into this document ("#",
// "#/$defs/x", "#/definitions/x", "#/properties/a/items"), or an anchor ("#name").
func (c *compiler) resolve(r any, ptr string) (node, error) {
	s, ok := r.(string)
	if !ok {
		return node{}, schemaError(ptr, "$ref must be a string")
	}
	frag, found := strings.CutPrefix(s, "#")
	if !found {
		// A reference to the document's own $id is a reference to the root.
		base, rest, _ := strings.Cut(s, "#")
		if o, ok := c.root.(*object); !ok || base == "" || (o.vals["$id"] != base && o.vals["id"] != base) {
			return node{}, schemaError(ptr, "$ref %q leaves the document (only references within it are supported)", s)
		}
		frag = rest
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return node{}, schemaError(ptr, "$ref %q: %v", s, err)
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		if n, ok := findAnchor(c.root, "", frag); ok {
			return n, nil
		}
		return node{}, schemaError(ptr, "$ref %q: no $anchor %q in the document", s, frag)
	}
	cur, at := c.root, ""
	if frag != "" {
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			at += "/" + escapePointer(tok)
			switch v := cur.(type) {
			case *object:
				next, ok := v.get(tok)
				if !ok {
					return node{}, schemaError(ptr, "$ref %q: nothing at %s", s, at)
				}
				cur = next
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(v) {
					return node{}, schemaError(ptr, "$ref %q: nothing at %s", s, at)
				}
				cur = v[i]
			default:
				return node{}, schemaError(ptr, "$ref %q: nothing at %s", s, at)
			}
		}
	}
	return node{cur, at}, nil
}

// findAnchor looks for a schema declaring $anchor name (or a draft 7 "$id": "#name").
func findAnchor(v any, ptr, name string) (node, bool) {
	switch v := v.(type) {
	case *object:
		if v.vals["$anchor"] == name || v.vals["$id"] == "#"+name {
			return node{v, ptr}, true
		}
		for _, k := range v.keys {
			if n, ok := findAnchor(v.vals[k], ptr+"/"+escapePointer(k), name); ok {
				return n, true
			}
		}
	case []any:
		for i, e := range v {
			if n, ok := findAnchor(e, ptr+"/"+strconv.Itoa(i), name); ok {
				return n, true
			}
		}
	}
	return node{}, false
}

// compileConjunction writes the grammar of the values satisfying all of nodes: the choice
// of its flattened alternatives.
func (c *compiler) compileConjunction(nodes []node, ptr string) (expr, error) {
	fs, err := c.flatten(nodes, ptr)
	if err != nil {
		return nil, err
	}
	var choices []expr
	for _, f := range fs {
		e, err := c.compileFlat(f)
		if err != nil {
			return nil, err
		}
		if e != nil {
			choices = append(choices, e)
		}
	}
	return newAlt(choices...), nil
}

// compileFlat writes the grammar of one flattened alternative: a choice over the JSON types
// it admits.
func (c *compiler) compileFlat(f *flat) (expr, error) {
	if f.hasEnum {
		return c.compileEnum(f)
	}
	var choices []expr
	add := func(e expr, err error) error {
		if err != nil {
			return err
		}
		if e != nil {
			choices = append(choices, e)
		}
		return nil
	}
	rest := *f
	rest.excluded = nil // what the alternative admits but for "not"
	for _, v := range f.excluded {
		switch v.(type) {
		case nil, bool, json.Number:
			continue // written around below
		}
		if r, err := c.rejects(&rest, v, 0); err != nil {
			return nil, err
		} else if !r {
			return nil, schemaError(f.ptr, "\"not\" with enum or const is supported only for null, booleans, integers and values the rest of the schema refuses")
		}
	}
	if f.types&tNull != 0 {
		choices = append(choices, lit("null"))
	}
	if f.types&tBoolean != 0 {
		for _, b := range []bool{true, false} {
			if !containsValue(f.excluded, b) {
				choices = append(choices, lit(strconv.FormatBool(b)))
			}
		}
	}
	if f.types&tObject != 0 {
		if err := add(c.compileObject(f)); err != nil {
			return nil, err
		}
	}
	if f.types&tArray != 0 {
		if err := add(c.compileArray(f)); err != nil {
			return nil, err
		}
	}
	if f.types&tString != 0 {
		if err := add(c.compileString(f)); err != nil {
			return nil, err
		}
	}
	if f.types&(tNumber|tInteger) != 0 {
		if err := add(c.compileNumber(f)); err != nil {
			return nil, err
		}
	}
	return newAlt(choices...), nil
}

// compileEnum writes the enum values that also satisfy the alternative's other keywords.
func (c *compiler) compileEnum(f *flat) (expr, error) {
	var choices []expr
	seen := map[string]bool{}
	for _, v := range f.enum {
		if containsValue(f.excluded, v) {
			continue
		}
		ok, err := c.admits(f, v)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var b strings.Builder
		encodeCompact(&b, v)
		if !seen[b.String()] {
			seen[b.String()] = true
			choices = append(choices, lit(b.String()))
		}
	}
	return newAlt(choices...), nil
}

// admits reports whether an enum or const value satisfies the alternative's other keywords.
func (c *compiler) admits(f *flat, v any) (bool, error) {
	switch v := v.(type) {
	case nil:
		return f.types&tNull != 0, nil
	case bool:
		return f.types&tBoolean != 0, nil
	case string:
		if f.types&tString == 0 {
			return false, nil
		}
		n := len([]rune(v))
		if n < f.minLen || (f.maxLen >= 0 && n > f.maxLen) {
			return false, nil
		}
		for _, p := range f.patterns {
			re, err := regexp.Compile(p.v.(string))
			if err != nil {
				return false, schemaError(p.ptr, "pattern %q beside enum/const: %v", p.v, err)
			}
			if !re.MatchString(v) {
				return false, nil
			}
		}
		if len(f.formats) > 0 {
			return false, schemaError(f.ptr, "format beside enum/const is not supported")
		}
		return true, nil
	case []any:
		if f.types&tArray == 0 {
			return false, nil
		}
		if len(f.prefix) > 0 || len(f.items) > 0 || f.unique || len(f.contains) > 0 {
			return false, schemaError(f.ptr, "an array enum/const beside items/prefixItems/uniqueItems/contains is not supported")
		}
		return len(v) >= f.minItems && (f.maxItems < 0 || len(v) <= f.maxItems), nil
	case *object:
		if f.types&tObject == 0 {
			return false, nil
		}
		if f.shaped || len(f.required) > 0 || len(f.forbidden) > 0 || f.minProps > 0 || f.maxProps >= 0 {
			return false, schemaError(f.ptr, "an object enum/const beside property keywords is not supported")
		}
		return true, nil
	}
	return c.admitsNumber(f, v)
}
