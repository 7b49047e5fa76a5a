package chat

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// loadTemplate compiles the shared chat template name (a file in chat_templates/).
func loadTemplate(t testing.TB, name string) *Template {
	t.Helper()
	src, err := os.ReadFile(testdata.Path(t, "chat_templates/"+name))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := New(string(src))
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	return tmpl
}

// fixedNow is the clock of every test: Friday 7 March 2025, 09:05:03 UTC.
func fixedNow() time.Time { return time.Date(2025, 3, 7, 9, 5, 3, 0, time.UTC) }

// basicConversation is the fixed system, user, assistant, user conversation.
func basicConversation() []Message {
	return []Message{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "Hello there"},
		{Role: "assistant", Content: "Hi! How can I help?"},
		{Role: "user", Content: "What is 2+2?"},
	}
}

// weatherTool is one OpenAI-shaped tool.
func weatherTool() map[string]any {
	return Tool{Function: ToolFunction{
		Name:        "get_weather",
		Description: "Get the weather for a city.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"city": map[string]any{"type": "string", "description": "City name"},
				"days": map[string]any{"type": "integer"},
			},
			"required": []string{"city"},
		},
	}}.Map()
}

// toolConversation holds a tool call and its result.
func toolConversation() []Message {
	return []Message{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "Weather in Paris & <Lyon>?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "abcdefghi", Function: FunctionCall{
			Name: "get_weather", Arguments: `{"city": "Paris", "days": 2}`}}}},
		{Role: "tool", Content: `{"temp": 21}`, ToolCallID: "abcdefghi"},
		{Role: "assistant", Content: "It is 21°C."},
		{Role: "user", Content: "Thanks!"},
	}
}

// sharedTemplates returns the source of every shared chat template, by file name.
func sharedTemplates(t testing.TB) map[string]string {
	t.Helper()
	dir := testdata.Path(t, "chat_templates")
	files, err := filepath.Glob(filepath.Join(dir, "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", dir, err)
	}
	srcs := make(map[string]string, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[filepath.Base(f)] = string(b)
	}
	return srcs
}

// comparedInputs are what the tests that render a template two ways compare on: the basic
// conversation with extra variables of every kind, and the tool conversation with a tool.
func comparedInputs() []Input {
	extra := map[string]any{"enable_thinking": false, "n": 3, "x": 2.0, "s": "é", "list": []any{nil, true, 1.5, "a"}}
	return []Input{
		{Messages: basicConversation(), AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>", Now: fixedNow, Extra: extra},
		{Messages: toolConversation(), Tools: []map[string]any{weatherTool()}, AddGenerationPrompt: true, Now: fixedNow},
	}
}
