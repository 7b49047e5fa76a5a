package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/structured/jsonschema"
)

// MaxParallelCalls is the most calls a grammar of parallel calls admits in one reply.
const MaxParallelCalls = 4

// Function is a tool as a grammar of calls needs it: its name and the JSON Schema of its
// arguments as the request wrote it (property order is the order calls write them in;
// empty: no arguments).
type Function struct {
	Name       string
	Parameters json.RawMessage
}

// argForm is how a family writes a call's arguments.
type argForm int

const (
	// jsonArgs: one JSON object.
	jsonArgs argForm = iota
	// functionParams: <parameter=KEY>\nVALUE\n</parameter>\n per argument (Qwen3-Coder,
	// Seed-OSS).
	functionParams
	// argPairs: <arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n per argument (GLM).
	argPairs
)

// syntax is how a family writes calls in a reply.
type syntax struct {
	args argForm
	// call writes the k-th call of a reply (k from 0) of the function name whose
	// arguments are the rule args, as GBNF.
	call func(name, args string, k int) string
	// sep is the GBNF between two calls; wrap the GBNF of the reply around its calls.
	sep  string
	wrap func(calls string) string
	// single: the family writes one call per reply.
	single bool
	// trigger is the text every reply of calls in this form begins with, and that text
	// does not otherwise contain ("" for a family whose calls have no such mark).
	trigger string
}

// jsonCall writes a call object whose name is under nameKey and the arguments under argsKey.
func jsonCall(nameKey, argsKey string) func(name, args string, k int) string {
	return func(name, args string, _ int) string {
		return lit(`{"`+nameKey+`":`+jsonString(name)+`,"`+argsKey+`":`) + " " + args + ` "}"`
	}
}

// around writes calls between open and closing text.
func around(open, closing string) func(string) string {
	return func(calls string) string {
		s := lit(open) + " " + calls
		if closing != "" {
			s += " " + lit(closing)
		}
		return s
	}
}

// syntaxes are the call syntaxes of the families Grammar serves; a family with several
// forms (Mistral's array and [ARGS] forms, DeepSeek V3/R1's fenced form and V3.1's) lists
// each, and a reply takes one.
var syntaxes = map[string][]syntax{
	Hermes: {{call: func(name, args string, _ int) string {
		return lit("<tool_call>\n{\"name\":"+jsonString(name)+",\"arguments\":") + " " + args + " " + lit("}\n</tool_call>")
	}, sep: lit("\n"), wrap: around("", ""), trigger: "<tool_call>"}},
	Llama3JSON: {{call: jsonCall("name", "parameters"), wrap: around("", ""), single: true, trigger: `{"name":`}},
	Mistral: {
		{call: jsonCall("name", "arguments"), sep: `","`, wrap: around("[TOOL_CALLS][", "]"), trigger: "[TOOL_CALLS]"},
		{call: func(name, args string, _ int) string {
			return lit("[TOOL_CALLS]"+name+"[ARGS]") + " " + args
		}, wrap: around("", ""), trigger: "[TOOL_CALLS]"},
	},
	Granite:  {{call: jsonCall("name", "arguments"), sep: `","`, wrap: around("<|tool_call|>[", "]"), trigger: "<|tool_call|>"}},
	Apriel:   {{call: jsonCall("name", "arguments"), sep: `","`, wrap: around("<tool_calls>[", "]</tool_calls>"), trigger: "<tool_calls>"}},
	CommandR: {{call: jsonCall("tool_name", "parameters"), sep: `","`, wrap: around("Action:\n```json\n[", "]\n```"), trigger: "Action:\n```json"}},
	// Command R7B numbers each call with the count of the conversation's calls so far, which
	// the grammar cannot know: any number is admitted, and the parser gives ids of its own.
	CommandR7B: {{call: func(name, args string, _ int) string {
		return lit(`{"tool_call_id":"`) + " [0-9]{1,6} " + lit(`","tool_name":`+jsonString(name)+`,"parameters":`) + " " + args + ` "}"`
	}, sep: `","`, wrap: around("<|START_ACTION|>[", "]<|END_ACTION|>"), trigger: "<|START_ACTION|>"}},
	DeepSeekV3: {
		{call: func(name, args string, _ int) string {
			return lit("<｜tool▁call▁begin｜>"+name+"<｜tool▁sep｜>") + " " + args + " " + lit("<｜tool▁call▁end｜>")
		}, wrap: around("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), trigger: "<｜tool▁calls▁begin｜>"},
		{call: func(name, args string, _ int) string {
			return lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>"+name+"\n```json\n") + " " + args + " " + lit("\n```<｜tool▁call▁end｜>")
		}, wrap: around("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), trigger: "<｜tool▁calls▁begin｜>"},
	},
	KimiK2: {{call: func(name, args string, k int) string {
		return lit("<|tool_call_begin|>functions."+name+":"+strconv.Itoa(k)+"<|tool_call_argument_begin|>") + " " + args + " " + lit("<|tool_call_end|>")
	}, wrap: around("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"), trigger: "<|tool_calls_section_begin|>"}},
	FunctionaryV31: {{call: func(name, args string, _ int) string {
		return lit("<function="+name+">") + " " + args + " " + lit("</function>")
	}, wrap: around("", ""), trigger: "<function="}},
	// The generation prompt ends with ">>>": the first call's name comes first.
	FunctionaryV32: {{call: func(name, args string, k int) string {
		if k == 0 {
			return lit(name+"\n") + " " + args
		}
		return lit(">>>"+name+"\n") + " " + args
	}, wrap: around("", "")}},
	OpenAI: {{call: func(name, args string, _ int) string {
		return lit("<|channel|>commentary to=functions."+name+" <|constrain|>json<|message|>") + " " + args + ` ("<|call|>")?`
	}, wrap: around("", ""), single: true, trigger: "<|channel|>commentary to=functions."}},
	Qwen3Coder: {{args: functionParams, call: func(name, args string, _ int) string {
		return lit("<tool_call>\n<function="+name+">\n") + " " + args + " " + lit("</function>\n</tool_call>")
	}, sep: lit("\n"), wrap: around("", ""), trigger: "<tool_call>"}},
	SeedOSS: {{args: functionParams, call: func(name, args string, _ int) string {
		return lit("<seed:tool_call>\n<function="+name+">\n") + " " + args + " " + lit("</function>\n</seed:tool_call>")
	}, sep: lit("\n"), wrap: around("", ""), trigger: "<seed:tool_call>"}},
	GLM45: {{args: argPairs, call: func(name, args string, _ int) string {
		return lit("<tool_call>"+name+"\n") + " " + args + " " + lit("</tool_call>")
	}, sep: lit("\n"), wrap: around("", ""), trigger: "<tool_call>"}},
}

// Grammar returns the GBNF grammar of replies that call functions in the syntax of the
// named parser, each call's arguments an instance of its function's parameters schema
// (objects closed where the schema leaves additionalProperties out, as OpenAI's strict mode
// does): one call of the function fn, or of any of fns when fn is empty; with parallel, one
// to MaxParallelCalls calls where the family writes several. It is what tool_choice
// "required" or a named function holds a reply to. Every parser has a grammar; a schema
// the grammar cannot enforce is an error naming the function and what it refuses.
func Grammar(parser string, fns []Function, fn string, parallel bool) (string, error) {
	forms, ok := syntaxes[parser]
	if !ok {
		return "", fmt.Errorf("tool-call parser %q: expected one of %s", parser, strings.Join(Names(), ", "))
	}
	var b strings.Builder
	var replies []string
	for fi, form := range forms {
		calls := MaxParallelCalls
		if !parallel || form.single {
			calls = 1
		}
		// call-F-K: the K-th call of a reply in form F, any of the functions.
		var alts [][]string
		matched := false
		for i, f := range fns {
			if fn != "" && f.Name != fn {
				continue
			}
			matched = true
			if !validName(f.Name) || f.Name == "" {
				return "", fmt.Errorf("function %q: a name of letters, digits, _ - . and : only can be written in the %s syntax", f.Name, parser)
			}
			args := fmt.Sprintf("args-%d-%d", fi, i)
			rules, err := argsRules(form.args, f, args, fmt.Sprintf("f%d-%d-", fi, i))
			if err != nil {
				return "", fmt.Errorf("function %q: %w", f.Name, err)
			}
			b.WriteString(rules)
			for k := range calls {
				if k == len(alts) {
					alts = append(alts, nil)
				}
				alts[k] = append(alts[k], form.call(f.Name, args, k))
			}
		}
		if !matched {
			return "", fmt.Errorf("no tool named %q", fn)
		}
		for k, a := range alts {
			fmt.Fprintf(&b, "call-%d-%d ::= %s\n", fi, k, strings.Join(a, " | "))
		}
		// Calls 0..n-1: call-0 (sep call-1 (sep call-2 ...)?)?
		body := ""
		for k := calls - 1; k >= 0; k-- {
			c := fmt.Sprintf("call-%d-%d", fi, k)
			switch {
			case k == calls-1 && k == 0:
				body = c
			case k == calls-1:
				body = "(" + form.sep + " " + c + ")?"
			case k == 0:
				body = c + " " + body
			default:
				body = "(" + form.sep + " " + c + " " + body + ")?"
			}
		}
		replies = append(replies, "("+form.wrap(body)+")")
	}
	return "root ::= " + strings.Join(replies, " | ") + "\n" + b.String(), nil
}

// Triggers returns the texts a reply's calls begin with in the syntax of the named parser
// (each a prefix of every reply Grammar admits), for a lazy grammar that holds a reply to
// calls from the first trigger on: tool_choice "auto". It returns nil for a family whose
// calls carry no mark of their own (Functionary v3.2, whose replies start with the
// function's name or "all").
func Triggers(parser string) []string {
	var out []string
	for _, form := range syntaxes[parser] {
		if form.trigger == "" {
			return nil
		}
		if !slices.Contains(out, form.trigger) {
			out = append(out, form.trigger)
		}
	}
	return out
}

// argsRules writes the rules of one function's arguments in a family's form, start rule
// start, every other rule's name beginning with prefix.
func argsRules(form argForm, f Function, start, prefix string) (string, error) {
	params := bytes.TrimSpace(f.Parameters)
	if len(params) == 0 || string(params) == "null" {
		params = []byte(`{"type":"object"}`)
	}
	if form == jsonArgs {
		g, err := jsonschema.ToGBNF(params, jsonschema.Options{StrictProperties: true, Start: start, RulePrefix: prefix})
		if err != nil {
			return "", fmt.Errorf("parameters: %w", err)
		}
		return g, nil
	}
	return textParams(form, params, start, prefix)
}

// textParams writes the rules of arguments written one parameter at a time between tags:
// the declared properties in the schema's order, the required ones always, each value as
// the parser reads it back (a string parameter's raw text, any other's JSON).
func textParams(form argForm, params []byte, start, prefix string) (string, error) {
	shape, err := readObjectSchema(params)
	if err != nil {
		return "", err
	}
	open, mid, closing := "<parameter=", ">\n", "\n</parameter>\n"
	if form == argPairs {
		open, mid, closing = "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n"
	}
	end := strings.TrimSpace(closing) // the closing tag a value must not hold
	var b strings.Builder
	var seq []string
	for j, p := range shape.props {
		name := fmt.Sprintf("%sp%d", prefix, j)
		var value string
		if p.rawString {
			v, err := rawStringValue(p, end)
			if err != nil {
				return "", fmt.Errorf("parameter %q: %w", p.name, err)
			}
			value = v
		} else {
			g, err := jsonschema.ToGBNF(params, jsonschema.Options{StrictProperties: true, Start: name, RulePrefix: name + "-",
				Pointer: "/properties/" + pointerToken(p.name)})
			if err != nil {
				return "", fmt.Errorf("parameter %q: %w", p.name, err)
			}
			b.WriteString(g)
			value = name
		}
		item := lit(open+p.name+mid) + " " + value + " " + lit(closing)
		if !p.required {
			item = "(" + item + ")?"
		}
		seq = append(seq, item)
	}
	body := `""`
	if len(seq) > 0 {
		body = strings.Join(seq, " ")
	}
	return start + " ::= " + body + "\n" + b.String(), nil
}

// objectShape is what a parameters schema says, read for text parameters.
type objectShape struct {
	props []paramShape
}

// paramShape is one declared parameter.
type paramShape struct {
	name      string
	required  bool
	rawString bool // "type": "string": written as raw text
	schema    map[string]json.RawMessage
}

// readObjectSchema reads a parameters schema whose arguments can be written as text
// parameters: an object schema of declared properties (in order), required ones among them.
func readObjectSchema(params []byte) (*objectShape, error) {
	top, keys, err := orderedObject(params)
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	var required []string
	var props json.RawMessage
	for _, k := range keys {
		switch k {
		case "type":
			var t string
			if json.Unmarshal(top[k], &t) != nil || t != "object" {
				return nil, fmt.Errorf(`parameters: "type" must be "object" to be written as parameters`)
			}
		case "properties":
			props = top[k]
		case "required":
			if err := json.Unmarshal(top[k], &required); err != nil {
				return nil, fmt.Errorf("parameters: required must be a list of names")
			}
		case "additionalProperties", "$schema", "$id", "$comment", "title", "description", "$defs", "definitions", "examples", "default", "strict":
			// Extra parameters are never written; the rest are annotations or $ref targets.
		default:
			return nil, fmt.Errorf("parameters: keyword %q cannot be written as text parameters", k)
		}
	}
	shape := &objectShape{}
	if props != nil {
		vals, names, err := orderedObject(props)
		if err != nil {
			return nil, fmt.Errorf("parameters: properties: %w", err)
		}
		for _, n := range names {
			schema, _, err := orderedObject(vals[n])
			if err != nil {
				return nil, fmt.Errorf("parameter %q: %w", n, err)
			}
			var t string
			_ = json.Unmarshal(schema["type"], &t)
			shape.props = append(shape.props, paramShape{name: n, rawString: t == "string", schema: schema})
		}
	}
	for _, r := range required {
		found := false
		for i := range shape.props {
			if shape.props[i].name == r {
				shape.props[i].required, found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("parameters: required %q is not among the properties", r)
		}
	}
	return shape, nil
}

// rawStringValue writes a string parameter's raw text: its enum or const values, or
// characters other than '<' (so the value never holds the closing tag end) and control
// characters but tab and newline, within minLength and maxLength.
func rawStringValue(p paramShape, end string) (string, error) {
	var values []string
	for k, v := range p.schema {
		switch k {
		case "type", "description", "title", "default", "examples", "minLength", "maxLength", "$comment", "deprecated":
		case "enum":
			if err := json.Unmarshal(v, &values); err != nil {
				return "", fmt.Errorf("enum of a string parameter must list strings")
			}
		case "const":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return "", fmt.Errorf("const of a string parameter must be a string")
			}
			values = []string{s}
		default:
			return "", fmt.Errorf("keyword %q on a string parameter cannot be constrained in raw text", k)
		}
	}
	lo, hi := 0, -1
	if v, ok := p.schema["minLength"]; ok && json.Unmarshal(v, &lo) != nil {
		return "", fmt.Errorf("minLength must be an integer")
	}
	if v, ok := p.schema["maxLength"]; ok && json.Unmarshal(v, &hi) != nil {
		return "", fmt.Errorf("maxLength must be an integer")
	}
	if values != nil {
		var alts []string
		for _, v := range values {
			n := len([]rune(v))
			if n >= lo && (hi < 0 || n <= hi) && !strings.Contains(v, end) {
				alts = append(alts, lit(v))
			}
		}
		if len(alts) == 0 {
			return "", fmt.Errorf("no enum value can be written")
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
	char := `[^<\x00-\x08\x0B-\x1F]`
	switch {
	case hi >= 0 && hi < lo:
		return "", fmt.Errorf("minLength %d is above maxLength %d", lo, hi)
	case hi >= 0:
		return fmt.Sprintf("%s{%d,%d}", char, lo, hi), nil
	case lo > 0:
		return fmt.Sprintf("%s{%d,}", char, lo), nil
	}
	return char + "*", nil
}

// orderedObject decodes a JSON object's members and its keys in order.
func orderedObject(data []byte) (map[string]json.RawMessage, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("must be a JSON object")
	}
	vals := map[string]json.RawMessage{}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		if _, dup := vals[k]; !dup {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	return vals, keys, nil
}

// pointerToken escapes a property name as a JSON pointer token in a URI fragment.
func pointerToken(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
	return strings.ReplaceAll(s, "%", "%25")
}

// jsonString returns s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// lit writes s as a GBNF string literal.
func lit(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
