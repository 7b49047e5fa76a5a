package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestUnsupportedRefused: fields kvasir does not implement yet are answered with a 400 that
// names them and says "not supported yet", never accepted and ignored.
func TestUnsupportedRefused(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	const tool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}`
	tests := []struct {
		name, path, body string
		param, code, msg string
	}{
		// The test model's ChatML template shows no tool-call syntax (tools.go's tests
		// serve one that does).
		{"tools, tool_choice absent, no parser", "/v1/chat/completions", `{` + msgs + `,"tools":[` + tool + `]}`,
			"tools", "unsupported_value", "--tool-call-parser"},
		{"tools, tool_choice auto, no parser", "/v1/chat/completions", `{` + msgs + `,"tools":[` + tool + `],"tool_choice":"auto"}`,
			"tools", "unsupported_value", "--tool-call-parser"},
		{"suffix", "/v1/completions", `{"prompt":"x","suffix":"end"}`, "suffix", "unsupported_parameter", "suffix is not supported yet"},
		{"best_of", "/v1/completions", `{"prompt":"x","n":1,"best_of":3}`, "best_of", "unsupported_value", "not supported yet"},
		{"functions", "/v1/chat/completions", `{` + msgs + `,"functions":[{"name":"f"}]}`, "functions", "unsupported_parameter", "functions is not supported yet (the legacy functions API: use tools)"},
		{"function_call", "/v1/chat/completions", `{` + msgs + `,"function_call":"auto"}`, "function_call", "unsupported_parameter", "not supported yet"},
		{"allowed_token_ids", "/v1/completions", `{"prompt":"x","allowed_token_ids":[5,6]}`, "allowed_token_ids", "unsupported_parameter", "not supported yet"},
		{"bad_words", "/v1/completions", `{"prompt":"x","bad_words":["no"]}`, "bad_words", "unsupported_parameter", "not supported yet"},
		{"truncate_prompt_tokens", "/v1/completions", `{"prompt":"x","truncate_prompt_tokens":4}`, "truncate_prompt_tokens", "unsupported_parameter", "not supported yet"},
		{"return_tokens_as_token_ids", "/v1/chat/completions", `{` + msgs + `,"logprobs":true,"return_tokens_as_token_ids":true}`, "return_tokens_as_token_ids", "unsupported_parameter", "not supported yet"},
		{"two unimplemented fields: the first by name", "/v1/completions", `{"prompt":"x","logits_processors":["p"],"bad_words":["no"]}`, "bad_words", "unsupported_parameter", "not supported yet"},
		{"tokenize add_special_tokens with messages", "/tokenize", `{` + msgs + `,"add_special_tokens":false}`, "add_special_tokens", "unsupported_parameter", "not supported yet"},
		// Invalid requests of the same fields.
		{"tool_choice required without tools", "/v1/chat/completions", `{` + msgs + `,"tool_choice":"required"}`, "tool_choice", "", "needs tools"},
		{"tool_choice unknown", "/v1/chat/completions", `{` + msgs + `,"tool_choice":"sometimes"}`, "tool_choice", "", `got "sometimes"`},
		{"tool_choice object without a name", "/v1/chat/completions", `{` + msgs + `,"tool_choice":{"type":"function"}}`, "tool_choice", "", "tool_choice must be"},
		{"add_generation_prompt with continue_final_message", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":"Once"}],"continue_final_message":true,"add_generation_prompt":true}`,
			"add_generation_prompt", "", "cannot both be true"},
		{"tokenize add_generation_prompt with continue_final_message", "/tokenize", `{"messages":[{"role":"assistant","content":"Once"}],"continue_final_message":true,"add_generation_prompt":true}`,
			"add_generation_prompt", "", "cannot both be true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := env.do(t, http.MethodPost, tc.path, []byte(tc.body))
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", status, body)
			}
			e := apiErrorOf(t, body)
			if e["param"] != tc.param {
				t.Errorf("param %v, want %q: %s", e["param"], tc.param, body)
			}
			if tc.code != "" && e["code"] != tc.code {
				t.Errorf("code %v, want %q: %s", e["code"], tc.code, body)
			}
			if e["type"] != "invalid_request_error" {
				t.Errorf("type %v, want invalid_request_error", e["type"])
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not say %q", msg, tc.msg)
			}
		})
	}
}

// TestHarmlessAccepted: fields that change nothing (as in vLLM) or values that ask for what
// kvasir does are accepted.
func TestHarmlessAccepted(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}
	chats := map[string]map[string]any{
		"response_format text":             {"response_format": map[string]any{"type": "text"}},
		"tools with tool_choice none":      {"tools": []any{tool}, "tool_choice": "none", "parallel_tool_calls": true},
		"tool_choice auto without tools":   {"tool_choice": "auto"},
		"empty tools":                      {"tools": []any{}},
		"null unimplemented fields":        {"functions": nil, "function_call": nil, "guided_json": nil, "bad_words": []any{}},
		"continue_final_message":           {"messages": []map[string]any{{"role": "assistant", "content": "Once"}}, "continue_final_message": true, "add_generation_prompt": false},
		"max_tokens beside the chat's own": {"max_tokens": 1, "max_completion_tokens": 2},
		"user":                             {"user": "u1"},
	}
	for name, extra := range chats {
		t.Run(name, func(t *testing.T) {
			body := map[string]any{"messages": msgs, "max_tokens": 2}
			for k, v := range extra {
				body[k] = v
			}
			var res chatResponse
			env.post(t, "/v1/chat/completions", body, &res)
			if len(res.Choices) != 1 {
				t.Fatalf("%d choices", len(res.Choices))
			}
		})
	}
	for name, extra := range map[string]map[string]any{
		"best_of equal to n":      {"n": 2, "best_of": 2},
		"empty suffix":            {"suffix": ""},
		"response_format text":    {"response_format": map[string]any{"type": "text"}},
		"unimplemented set false": {"return_tokens_as_token_ids": false, "truncate_prompt_tokens": nil},
	} {
		t.Run("completions "+name, func(t *testing.T) {
			body := map[string]any{"prompt": "x", "max_tokens": 2}
			for k, v := range extra {
				body[k] = v
			}
			var res completionResponse
			env.post(t, "/v1/completions", body, &res)
			if len(res.Choices) == 0 {
				t.Fatal("no choices")
			}
		})
	}
	// /tokenize still renders tools into the template, and add_special_tokens with a prompt.
	var tok struct{ Count int }
	env.post(t, "/tokenize", map[string]any{"messages": msgs, "tools": []any{tool}}, &tok)
	if tok.Count == 0 {
		t.Error("tokenize with tools gave no tokens")
	}
	env.post(t, "/tokenize", map[string]any{"prompt": "hi", "add_special_tokens": false}, &tok)
	if tok.Count == 0 {
		t.Error("tokenize of a prompt gave no tokens")
	}
}
