package chat

import (
	"strings"
	"testing"
)

// FuzzRender renders Qwen2.5's template with fuzzed message contents, roles and tool call
// arguments: it must never panic, and user text must reach the prompt.
func FuzzRender(f *testing.F) {
	tmpl := loadTemplate(f, "Qwen-Qwen2.5-7B-Instruct.jinja")
	f.Add("Hello", "Hi!", "user", `{"a": 1}`)
	f.Add("", "", "system", "")
	f.Add("{{ 1 }}{% if %}", "<|im_end|>\x00\xff", "tool", `[1, {"x": null}]`)
	f.Add("é😀\r\n\t", "</think>", "assistant", `{"nested": {"deep": [[[]]]}}`)
	f.Fuzz(func(t *testing.T, user, reply, role, args string) {
		msgs := []Message{
			{Role: "system", Content: reply},
			{Role: "user", Content: user},
			{Role: "assistant", Content: reply, ToolCalls: []ToolCall{{ID: "x", Function: FunctionCall{Name: user, Arguments: args}}}},
			{Role: role, Content: []ContentPart{{Text: user}}},
			{Role: "user", Content: user},
		}
		out, err := tmpl.Render(Input{Messages: msgs, AddGenerationPrompt: true, Tools: []map[string]any{weatherTool()}})
		if err != nil {
			return // content parts given to a string-only template may fail; it must not panic
		}
		if !strings.Contains(out, "<|im_start|>user\n"+user+"<|im_end|>") {
			t.Errorf("user text %q missing from output", user)
		}
	})
}

// FuzzNew compiles fuzzed template sources: it must never panic.
func FuzzNew(f *testing.F) {
	f.Add("{% for m in messages %}{{ m.content | tojson(indent=2) }}\n{% endfor %}")
	f.Add("{%- if x -%}{# c #}{{ 'a' ~ \"}}\" }}{% endif %}\r\n")
	f.Add("{{ {'a': [1, 2][::-1]} | tojson }}{% set ns = namespace(a=1) %}{% macro m(x) %}{{ x }}{% endmacro %}")
	f.Add("{% if %}{{ ")
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := New(src)
		if err != nil || tmpl == nil {
			return
		}
		// Render only small loop-free sources, so a fuzzed range() cannot run for long.
		if len(src) < 200 && !strings.Contains(src, "for") && !strings.Contains(src, "range") && !strings.Contains(src, "macro") {
			_, _ = tmpl.Render(Input{Messages: []Message{{Role: "user", Content: "x"}}})
		}
	})
}
