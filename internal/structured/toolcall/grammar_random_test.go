package toolcall

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	validator "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/kvasir-llm/kvasir/internal/structured"
)

// byteVocab is a vocabulary of the 256 bytes and one end-of-generation token: a model that
// draws uniformly among the allowed tokens is a random model at the byte level.
type byteVocab struct{}

func (byteVocab) NumTokens() int           { return 257 }
func (byteVocab) TokenBytes(id int) []byte { return []byte{byte(id)} }
func (byteVocab) IsSpecial(id int) bool    { return id == 256 }
func (byteVocab) IsEOG(id int) bool        { return id == 256 }

// randomTools are functions whose arguments stress the grammars: bounded strings, an enum,
// an integer range, an optional nested object and array, a nullable value, no arguments.
var randomTools = []Function{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"city": {"type": "string", "minLength": 1, "maxLength": 8},
		"days": {"type": "integer", "minimum": 1, "maximum": 7},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
		"where": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}}, "required": ["lat"]},
		"tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
		"note": {"type": ["string", "null"], "maxLength": 4}},
		"required": ["city", "days"]}`)},
	{Name: "now"},
	{Name: "set.alarm", Parameters: json.RawMessage(`{"type": "object", "properties": {"at": {"enum": ["07:00", "08:30"]}, "loud": {"type": "boolean"}}, "required": ["at", "loud"], "additionalProperties": false}`)},
}

// TestGrammarRandomModel draws random replies from the grammar of every family's
// tool_choice "required" (parallel and not) and named function, on a random byte-level
// model, and checks each reply: the grammar accepts it, the family's parser reads calls of
// the offered functions (the named one; one call when not parallel) and no content, and
// every call's arguments are valid against its function's schema (the validator library).
func TestGrammarRandomModel(t *testing.T) {
	vocab := byteVocab{}
	trie, err := structured.NewTokenTrie(vocab)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*validator.Schema{}
	var tools []Tool
	for _, f := range randomTools {
		params := f.Parameters
		if params == nil {
			params = json.RawMessage(`{"type": "object", "additionalProperties": false}`)
		}
		doc, err := validator.UnmarshalJSON(bytes.NewReader(params))
		if err != nil {
			t.Fatal(err)
		}
		c := validator.NewCompiler()
		if err := c.AddResource("file:///"+f.Name+".json", doc); err != nil {
			t.Fatal(err)
		}
		if schemas[f.Name], err = c.Compile("file:///" + f.Name + ".json"); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(params, &m)
		tools = append(tools, Tool{Name: f.Name, Parameters: m})
	}
	for _, parser := range Names() {
		t.Run(parser, func(t *testing.T) {
			for _, c := range []struct {
				fn       string
				parallel bool
			}{{"", true}, {"", false}, {"set.alarm", false}} {
				src, err := Grammar(parser, randomTools, c.fn, c.parallel)
				if err != nil {
					t.Fatal(err)
				}
				g, err := structured.ParseGBNF(src)
				if err != nil {
					t.Fatalf("%v\n%s", err, src)
				}
				cg, err := structured.Compile(g, structured.DefaultLimits())
				if err != nil {
					t.Fatalf("%v\n%s", err, src)
				}
				tg := structured.NewTokenGrammar(cg, trie, vocab)
				rng := rand.New(rand.NewPCG(uint64(len(parser)), 7))
				most := 0
				for range 25 {
					gen, err := structured.Simulate(tg, rng, 20000)
					if err != nil {
						t.Fatal(err)
					}
					out := string(gen.Output)
					if !gen.Ended || !gen.Matches {
						t.Fatalf("reply did not end in the grammar (ended %v): %q", gen.Ended, out)
					}
					p, _ := New(parser, Options{Tools: tools})
					evs := append(p.Feed(out), p.Finish()...)
					for _, e := range evs {
						if (e.Kind == Content || e.Kind == Reasoning) && strings.TrimSpace(e.Text) != "" {
							t.Errorf("%s: content %q in %q", parser, e.Text, out)
						}
					}
					calls := p.Calls()
					if len(calls) == 0 || (!c.parallel && len(calls) != 1) || len(calls) > MaxParallelCalls {
						t.Fatalf("%d calls read from %q (parallel %v)", len(calls), out, c.parallel)
					}
					most = max(most, len(calls))
					ids := map[string]bool{}
					for _, call := range calls {
						if ids[call.ID] {
							t.Errorf("%s: call id %q twice in %q", parser, call.ID, out)
						}
						ids[call.ID] = true
						sch := schemas[call.Name]
						if sch == nil || (c.fn != "" && call.Name != c.fn) {
							t.Fatalf("call of %q read from %q (named %q)", call.Name, out, c.fn)
						}
						v, err := validator.UnmarshalJSON(strings.NewReader(call.Arguments))
						if err != nil {
							t.Fatalf("arguments %q of %q: %v", call.Arguments, out, err)
						}
						if err := sch.Validate(v); err != nil {
							t.Errorf("%s: arguments %s of %s fail its schema: %v\nreply %q", parser, call.Arguments, call.Name, err, out)
						}
					}
				}
				if c.parallel && most < 2 && !syntaxes[parser][0].single {
					t.Errorf("parallel grammar never wrote two calls in 25 replies")
				}
			}
		})
	}
}

// TestGrammarTextParameters checks the grammar of parameters written as text (Qwen3-Coder,
// GLM): required parameters present, values typed as the schema says (string parameters
// raw, others JSON), no parameter the schema does not declare; and refusals naming what a
// text parameter cannot carry.
func TestGrammarTextParameters(t *testing.T) {
	compile := func(parser string) *structured.Compiled {
		src, err := Grammar(parser, grammarTools, "", false)
		if err != nil {
			t.Fatal(err)
		}
		g, err := structured.ParseGBNF(src)
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		cg, err := structured.Compile(g, structured.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return cg
	}
	coder := compile(Qwen3Coder)
	param := func(k, v string) string { return "<parameter=" + k + ">\n" + v + "\n</parameter>\n" }
	call := func(name, params string) string {
		return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>"
	}
	for in, want := range map[string]bool{
		call("get_weather", param("city", "Oslo")+param("days", "3")): true,
		call("now", ""): true,
		call("get_weather", param("city", "Oslo")):                                    false, // days is required
		call("get_weather", param("city", "Oslo")+param("days", "9")):                 false, // maximum 7
		call("get_weather", param("city", "Oslo")+param("days", `"3"`)):               false,
		call("get_weather", param("days", "3")+param("city", "Oslo")):                 false, // schema order
		call("get_weather", param("city", "Oslo")+param("days", "3")+param("x", "1")): false,
		call("get_weather", param("city", "a<b")+param("days", "3")):                  false,
		call("get_time", ""): false,
	} {
		if got := coder.Matches(in); got != want {
			t.Errorf("qwen3_coder: %q matched %v, want %v", in, got, want)
		}
	}
	glm := compile(GLM45)
	pair := func(k, v string) string { return "<arg_key>" + k + "</arg_key>\n<arg_value>" + v + "</arg_value>\n" }
	for in, want := range map[string]bool{
		"<tool_call>get_weather\n" + pair("city", "Oslo") + pair("days", "3") + "</tool_call>": true,
		"<tool_call>now\n</tool_call>":                                     true,
		"<tool_call>get_weather\n" + pair("city", "Oslo") + "</tool_call>": false,
	} {
		if got := glm.Matches(in); got != want {
			t.Errorf("glm45: %q matched %v, want %v", in, got, want)
		}
	}
	for _, c := range []struct{ params, want string }{
		{`{"type":"object","properties":{"d":{"type":"string","format":"date"}}}`, `parameter "d": keyword "format"`},
		{`{"type":"object","anyOf":[{"required":["a"]}],"properties":{"a":{}}}`, `keyword "anyOf"`},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]}`, `required "b"`},
	} {
		_, err := Grammar(Qwen3Coder, []Function{{Name: "f", Parameters: json.RawMessage(c.params)}}, "", false)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `function "f"`) {
			t.Errorf("%s: error %v, want one naming the function and %s", c.params, err, c.want)
		}
	}
}
