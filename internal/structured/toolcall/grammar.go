package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/structured/jsonschema"
)

// MaxParallelCalls is the most calls a grammar of parallel calls admits in one reply.
const MaxParallelCalls = 4

// callWrappers are, for each family whose calls are JSON objects, how a reply writes one
// call and several: the GBNF of the reply around rule "call" (one call's JSON), and the key
// of the arguments in that JSON.
var callWrappers = map[string]struct {
	one, many, argsKey string
}{
	Hermes: {one: `"<tool_call>\n" call "\n</tool_call>"`,
		many: `"<tool_call>\n" call "\n</tool_call>" ("\n<tool_call>\n" call "\n</tool_call>"){0,N}`, argsKey: "arguments"},
	Llama3JSON: {one: `call`, argsKey: "parameters"},
	Mistral: {one: `"[TOOL_CALLS][" call "]"`,
		many: `"[TOOL_CALLS][" call ("," call){0,N} "]"`, argsKey: "arguments"},
	Granite: {one: `"<|tool_call|>[" call "]"`,
		many: `"<|tool_call|>[" call ("," call){0,N} "]"`, argsKey: "arguments"},
}

// Function is a tool as a grammar of calls needs it: its name and the JSON Schema of its
// arguments as the request wrote it (property order is the order calls write them in;
// empty: any object, closed).
type Function struct {
	Name       string
	Parameters json.RawMessage
}

// Grammar returns the GBNF grammar of replies that call functions in the syntax of the
// named parser, each call's arguments an instance of its function's parameters schema
// (objects closed where the schema leaves additionalProperties out, as OpenAI's strict mode
// does): one call of the function fn, or of any of fns when fn is empty; with parallel, one
// to MaxParallelCalls calls. It is what tool_choice "required" or a named function holds a
// reply to. Families whose calls are JSON objects have grammars (hermes, llama3_json — one
// call —, mistral's array form, granite); the others are an error naming the family.
func Grammar(parser string, fns []Function, fn string, parallel bool) (string, error) {
	w, ok := callWrappers[parser]
	if !ok {
		return "", fmt.Errorf("tool calls in the %s syntax cannot be constrained yet (only %s)", parser, strings.Join(grammarParsers(), ", "))
	}
	// The schema of one call, written by hand so that "name" comes first, as the family's
	// calls write it.
	var alts []string
	for _, f := range fns {
		if fn != "" && f.Name != fn {
			continue
		}
		params := f.Parameters
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{"type":"object"}`)
		}
		name, _ := json.Marshal(f.Name)
		key, _ := json.Marshal(w.argsKey)
		alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},%s:%s},"required":["name",%s],"additionalProperties":false}`,
			name, key, params, key))
	}
	if len(alts) == 0 {
		return "", fmt.Errorf("no tool named %q", fn)
	}
	schema := []byte(`{"anyOf":[` + strings.Join(alts, ",") + `]}`)
	call, err := jsonschema.ToGBNF(schema, jsonschema.Options{StrictProperties: true, Start: "call"})
	if err != nil {
		return "", fmt.Errorf("the tools' parameters: %w", err)
	}
	root := w.one
	if parallel && w.many != "" {
		root = strings.ReplaceAll(w.many, "{0,N}", fmt.Sprintf("{0,%d}", MaxParallelCalls-1))
	}
	return "root ::= " + root + "\n" + call, nil
}

// grammarParsers lists the families Grammar serves.
func grammarParsers() []string {
	var names []string
	for _, n := range Names() {
		if _, ok := callWrappers[n]; ok {
			names = append(names, n)
		}
	}
	return names
}
