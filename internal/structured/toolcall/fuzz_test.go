package toolcall

import (
	"encoding/json"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/structured"
)

// FuzzParsers feeds every parser arbitrary text in arbitrary pieces: no panic, and the
// pieces hand out what the whole text does.
func FuzzParsers(f *testing.F) {
	for _, tc := range scripted {
		f.Add(tc.text, uint64(0x5555))
	}
	for _, s := range []string{
		`<tool_call>{"name": "f", "arguments": {"a": [1, {"b": "}"}]}}</tool_call>tail`,
		"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", "[TOOL_CALLS]f[CALL_ID]abc[ARGS]{\"x\": \"\\\"\"}",
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
		"<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
		"<function=f>{\"a\": 1}</function>", ">>>f\n{}>>>all\nhi", "Action:\n```json\n[{\"tool_name\": \"f\", \"parameters\": {}}]```",
		"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
	} {
		f.Add(s, uint64(0x1234567))
	}
	names := Names()
	f.Fuzz(func(t *testing.T, text string, cuts uint64) {
		if len(text) > 4<<10 {
			return // a region is read again per piece: long texts only slow the search down
		}
		for _, name := range names {
			whole, wholeCalls := gather(t, name, text, nil, func(int) bool { return false })
			pieces, piecesCalls := gather(t, name, text, nil, func(i int) bool { return cuts>>(uint(i)%64)&1 == 1 })
			compareStreams(t, text, whole, wholeCalls, pieces, piecesCalls)
		}
	})
}

// FuzzGrammar builds every parser's grammar from arbitrary parameters schemas and names:
// an error or a grammar the GBNF parser reads, never a panic.
func FuzzGrammar(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"type":"integer"}},"required":["a"]}`,
		`{"type":"object","properties":{"a":{"enum":["x","y"]},"b":{"$ref":"#/$defs/d"}},"$defs":{"d":{"type":"boolean"}}}`,
		`{"type":"object","properties":{"a/b~c%":{"type":"array","items":{"type":"number"}}}}`,
		``, `null`, `{}`, `[]`, `{"type":"string"}`,
	} {
		f.Add(s, "get_weather")
	}
	names := Names()
	f.Fuzz(func(t *testing.T, params, name string) {
		if len(params) > 2<<10 {
			return
		}
		for _, parser := range names {
			src, err := Grammar(parser, []Function{{Name: name, Parameters: json.RawMessage(params)}, {Name: "other"}}, "", true)
			if err != nil {
				continue
			}
			if _, err := structured.ParseGBNF(src); err != nil {
				t.Fatalf("%s, parameters %q, name %q: %v\n%s", parser, params, name, err, src)
			}
		}
	})
}
