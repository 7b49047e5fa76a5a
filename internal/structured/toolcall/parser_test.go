package toolcall

import (
	"strings"
	"testing"
)

// scripted are outputs as models write them (beyond what a template renders), and what
// each parses into: content and calls (arguments compared as JSON values).
var scripted = []struct {
	name, parser, text, content, reasoning string
	calls                                  []Call
}{
	{name: "granite 3 array", parser: Granite,
		text:    `Sure.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]`,
		content: "Sure.", calls: []Call{{Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Name: "get_time", Arguments: `{}`}}},
	{name: "functionary v3.2 text then call", parser: FunctionaryV32,
		text:    "all\nLet me look.>>>get_weather\n{\"city\": \"Paris\"}",
		content: "Let me look.", calls: []Call{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
	{name: "functionary v3.2 plain answer", parser: FunctionaryV32,
		text: "It is sunny in Paris.", content: "It is sunny in Paris."},
	{name: "gpt-oss analysis then call", parser: OpenAI,
		text:      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
		reasoning: "Need weather.", calls: []Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
	{name: "gpt-oss final answer", parser: OpenAI,
		text:    "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
		content: "Hello!", reasoning: "Easy."},
	{name: "hermes prose mentioning the tag", parser: Hermes,
		text: "Use <tool_call> tags like <tool_call>this</tool_call>.", content: "Use <tool_call> tags like <tool_call>this</tool_call>."},
	{name: "hermes object without a name", parser: Hermes,
		text: `<tool_call>{"city": "Paris"}</tool_call>`, content: `<tool_call>{"city": "Paris"}</tool_call>`},
	{name: "hermes call cut off by the end of output", parser: Hermes,
		text:  `<tool_call>{"name": "get_weather", "arguments": {"city": "Pa`,
		calls: []Call{{Name: "get_weather", Arguments: `{"city": "Pa`}}},
	{name: "llama plain JSON answer", parser: Llama3JSON,
		text: `{"answer": 42}`, content: `{"answer": 42}`},
	{name: "llama two calls", parser: Llama3JSON,
		text:  `<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}`,
		calls: []Call{{Name: "a", Arguments: `{"x": 1}`}, {Name: "b", Arguments: `{}`}}},
	{name: "llama prose", parser: Llama3JSON, text: "Hello {there}", content: "Hello {there}"},
	{name: "mistral prose", parser: Mistral, text: "[TOOL_CALLS] is a token.", content: "[TOOL_CALLS] is a token."},
	{name: "qwen3 coder schema types", parser: Qwen3Coder,
		text:  "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		calls: []Call{{Name: "get_weather", Arguments: `{"city": "42", "days": 3}`}}},
	{name: "deepseek text before", parser: DeepSeekV3,
		text:    "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		content: "Checking.", calls: []Call{{Name: "get_time", Arguments: `{}`}}},
	{name: "command-r prose with Action", parser: CommandR, text: "Action: none needed.", content: "Action: none needed."},
	{name: "command r7b thinking then calls", parser: CommandR7B,
		text:      "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"4\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}},\n    {\"tool_call_id\": \"5\", \"tool_name\": \"get_time\", \"parameters\": {}}\n]<|END_ACTION|>",
		reasoning: "I will look it up.", calls: []Call{{Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Name: "get_time", Arguments: `{}`}}},
	{name: "command r7b response", parser: CommandR7B,
		text: "<|START_THINKING|><|END_THINKING|><|START_RESPONSE|>It is sunny in Paris.<|END_RESPONSE|>", content: "It is sunny in Paris."},
	{name: "command r7b response cut off", parser: CommandR7B,
		text: "<|START_RESPONSE|>It is sun", content: "It is sun"},
	{name: "command r7b prose with the action marker", parser: CommandR7B,
		text: "Write <|START_ACTION|> to act.", content: "Write <|START_ACTION|> to act."},
	{name: "command r7b call cut off", parser: CommandR7B,
		text:  `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Pa`,
		calls: []Call{{Name: "get_weather", Arguments: `{"city": "Pa`}}},
	{name: "glm prose", parser: GLM45, text: "<tool_call> is how I call tools", content: "<tool_call> is how I call tools"},
}

// TestScripted parses each scripted output at once and a byte at a time.
func TestScripted(t *testing.T) {
	tools := toolsOf(weatherTools())
	for _, tc := range scripted {
		t.Run(tc.name, func(t *testing.T) {
			out, calls := gather(t, tc.parser, tc.text, tools, func(int) bool { return false })
			if out.content != tc.content || out.reasoning != tc.reasoning {
				t.Errorf("content %q, reasoning %q; want %q, %q", out.content, out.reasoning, tc.content, tc.reasoning)
			}
			if len(tc.calls) > 0 && strings.HasSuffix(tc.calls[0].Arguments, "Pa") {
				// A cut-off call keeps the text it had, which is not JSON.
				if len(calls) != 1 || calls[0].Arguments != tc.calls[0].Arguments {
					t.Errorf("calls %+v, want %+v", calls, tc.calls)
				}
			} else {
				checkCalls(t, calls, tc.calls)
			}
			checkStreamed(t, tc.parser, tc.text, tools)
		})
	}
}

// TestDetect checks the parser each shared template is detected as, for templates of the
// families whose round trip cannot be rendered (their templates do not render calls as the
// model writes them).
func TestDetect(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"You are a helpful assistant with access to the following tools ... respond only with <|tool_call|> followed by a JSON list", Granite},
		{"{{ '>>>' + tool_call['function']['name'] }} ... recipient", FunctionaryV32},
		{"<|start|>assistant<|channel|>final<|message|>", OpenAI},
		{"{{ message.content }}", ""},
	} {
		if got := Detect(tc.src); got != tc.want {
			t.Errorf("Detect(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

// TestNewUnknown checks an unknown parser name is an error naming the known ones.
func TestNewUnknown(t *testing.T) {
	_, err := New("nope", Options{})
	if err == nil || !strings.Contains(err.Error(), Hermes) {
		t.Fatalf("New(nope) = %v, want an error listing the parsers", err)
	}
}
