package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestPythonisms checks the Python-isms HF templates use; each want is what transformers'
// Jinja environment (trim_blocks, lstrip_blocks) renders.
func TestPythonisms(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"strip", `{{ "  a b \n".strip() }}|{{ "xxaxx".strip("x") }}`, "a b|a"},
		{"lstrip rstrip", `[{{ "\n a ".lstrip() }}][{{ " a \n".rstrip() }}][{{ "\n\nx".lstrip("\n") }}]`, "[a ][ a][x]"},
		{"startswith endswith", `{{ "<think>x".startswith("<think>") }} {{ "abc".endswith("bc") }} {{ "abc".endswith("x") }}`, "True True False"},
		{"split", `{{ "a</think>b</think>c".split("</think>")[-1] }} {{ " a  b ".split() | length }}`, "c 2"},
		{"replace upper lower title", `{{ "a-b".replace("-", "+") }} {{ "ab".upper() }} {{ "AB".lower() }} {{ "hello world".title() }}`, "a+b AB ab Hello World"},
		{"format", `{{ "{} and {}".format("x", 1) }}`, "x and 1"},
		{"dict methods", `{% set d = {"a": 1, "b": 2} %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list | length }}{{ d.values() | sum }}{{ d.get("z", "dflt") }}{{ d.get("a") }}`, "a=1;b=2;23dflt1"},
		{"namespace", `{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}`, "3"},
		{"tests", `{{ "s" is string }} {{ {} is mapping }} {{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 3 is number }}`, "True True False True True True"},
		{"loop", `{% for m in [1, 2, 3] %}{{ m }}{% if not loop.last %},{% endif %}{% if loop.first %}^{% endif %}{% endfor %} {{ loop is defined }}`, "1,^2,3 False"},
		{"trim filter", `{{ "  x  " | trim }}`, "x"},
		{"slice negative index", `{{ [1, 2, 3][1:] | length }}{{ [1, 2, 3][-1] }}{{ "abc"[::-1] }}`, "23cba"},
		{"in", `{{ "ab" in "cabd" }} {{ "tool_calls" in {"role": "x"} }}`, "True False"},
		{"whitespace control", "{% if true %}\n  x\n{% endif %}\n  {%- if true -%}\n y \n{%- endif %}\n", "  x\ny"},
		{"newline after expression in block", "{% for m in [1,2] %}{{ m }}\n{% endfor %}x", "1\n2\nx"},
		{"trim marker after expression", "a \n{{ 1 }}{%- if true %}b{% endif %}", "a \n1b"},
		{"comment and CRLF", "{% if true %}{# c #}\n  {% if true %}\n z\n{% endif %}{% endif %}\r\nq\r\n", " z\nq"},
		{"trim markers", "{%- for m in [1,2] -%}{{ m }}\n\n{%- endfor %}", "12"},
		{"closer inside string", "{{ \"%}\" }}\n{% if true %}\ny{% endif %}", "%}\ny"},
		{"trailing newline dropped", "a\n", "a"},
		// Known deviation: the engine prints none as "" where Python prints "None".
		{"string concat", `{{ "a" ~ 1 }}`, "a1"},
		{"selectattr", `{{ [{"r": "u"}, {"r": "a"}, {"r": "u"}] | selectattr("r", "equalto", "u") | list | length }}`, "2"},
		{"macro", `{% macro f(x, y="d") %}<{{ x }}{{ y }}>{% endmacro %}{{ f(1) }}{{ f(2, y="e") }}`, "<1d><2e>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := New(tc.src)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			got, err := tmpl.Render(Input{Messages: basicConversation()})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMessageShape checks what a template sees of each message: optional fields only when
// set, content parts as dicts, tool call arguments parsed into a dict.
func TestMessageShape(t *testing.T) {
	src := `{% for m in messages %}{{ m | tojson }}
{% endfor %}{{ tools | tojson }} {{ documents is none }} {{ bos_token }}{{ eos_token }}`
	tmpl, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{
		Messages: []Message{
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "look"}, {Type: "image_url", ImageURL: "data:x"}}},
			{Role: "assistant", Content: nil, ReasoningContent: "r", ToolCalls: []ToolCall{
				{ID: "c1", Function: FunctionCall{Name: "f", Arguments: `{"z": 1, "a": [true]}`}},
				{Function: FunctionCall{Name: "g", Arguments: `not json`}},
			}},
			{Role: "tool", Name: "f", Content: "ok", ToolCallID: "c1"},
		},
		BOSToken: "<B>", EOSToken: "<E>",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}]}
{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [true]}}}, {"type": "function", "function": {"name": "g", "arguments": "not json"}}], "reasoning_content": "r"}
{"role": "tool", "content": "ok", "name": "f", "tool_call_id": "c1"}
null True <B><E>`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestToolsKeyOrder checks that tools given as plain maps come out in OpenAI's key order
// and json.RawMessage values keep their own order.
func TestToolsKeyOrder(t *testing.T) {
	tmpl, err := New(`{{ tools | tojson }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{Tools: []map[string]any{
		{"function": map[string]any{"parameters": map[string]any{"type": "object"}, "strict": true, "name": "f", "description": "d"}, "type": "function"},
		{"type": "function", "function": json.RawMessage(`{"parameters": {}, "name": "g"}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}}, ` +
		`{"type": "function", "function": {"parameters": {}, "name": "g"}}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestErrors checks that failures carry the template's reason.
func TestErrors(t *testing.T) {
	if _, err := New("line one\n{% if x %}\n{% for %}\n"); err == nil || !strings.Contains(err.Error(), "line") {
		t.Errorf("New on bad syntax: err = %v, want one naming the line", err)
	}
	if _, err := New("{% if x %}unclosed"); err == nil {
		t.Error("New on an unclosed if: no error")
	}

	tmpl, err := New(`{% if messages[0].role == "system" %}{{ raise_exception("No system for " ~ messages[0].role) }}{% endif %}ok`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{Messages: basicConversation()})
	var raised *RaisedError
	if !errors.As(err, &raised) || raised.Message != "No system for system" {
		t.Errorf("raise_exception: err = %v, want *RaisedError %q", err, "No system for system")
	}
	if out, err := tmpl.Render(Input{Messages: []Message{{Role: "user", Content: "x"}}}); err != nil || out != "ok" {
		t.Errorf("Render = %q, %v; want ok", out, err)
	}

	if _, err := tmpl.Render(Input{Extra: map[string]any{"messages": 1}}); err == nil {
		t.Error("Extra overriding messages: no error")
	}
	if _, err := tmpl.Render(Input{Extra: map[string]any{"bad": make(chan int)}}); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("Extra with a channel: err = %v, want one naming the variable", err)
	}
	if _, err := tmpl.Render(Input{Messages: []Message{{Role: "user", Content: 3 + 2i}}}); err == nil {
		t.Error("complex content: no error")
	}
}
