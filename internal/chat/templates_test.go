package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// refusals lists the shared templates that refuse the basic conversation themselves, through
// raise_exception, with the text they raise.
var refusals = map[string]string{
	// Gemma 2 has no system role: "{{ raise_exception('System role not supported') }}".
	"google-gemma-2-2b-it.jinja": "System role not supported",
}

// TestAllTemplatesRender renders the basic conversation with every shared template. Note: a
// few tool_use templates (Hermes, Command R+ tool_use, firefunction) fail in Python when tools
// is None because Python cannot iterate None; the Go engine iterates it as empty, so they
// render here.
func TestAllTemplatesRender(t *testing.T) {
	dir := testdata.Path(t, "chat_templates")
	files, err := filepath.Glob(filepath.Join(dir, "*.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 57 {
		t.Fatalf("found %d templates in %s, want 57", len(files), dir)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".jinja"), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := New(string(src))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			out, err := tmpl.Render(Input{
				Messages:            basicConversation(),
				AddGenerationPrompt: true,
				BOSToken:            "<s>",
				EOSToken:            "</s>",
				Now:                 fixedNow,
			})
			if want, refuses := refusals[name]; refuses {
				var raised *RaisedError
				if !errors.As(err, &raised) || raised.Message != want || !strings.Contains(err.Error(), want) {
					t.Fatalf("Render error = %v, want the template's refusal %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			for _, text := range []string{"Hello there", "What is 2+2?"} {
				if !strings.Contains(out, text) {
					t.Errorf("output lacks user text %q:\n%s", text, out)
				}
			}
		})
	}
}

// llamaHeader builds one Llama 3 turn.
func llamaTurn(role, text string) string {
	return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + text + "<|eot_id|>"
}

// TestExactRenders checks whole prompts, derived by hand from each template under
// transformers' settings (trim_blocks, lstrip_blocks, one trailing newline dropped) and
// confirmed against Python Jinja2 with transformers' environment.
func TestExactRenders(t *testing.T) {
	llamaBasic := func(date string) string {
		return "<|begin_of_text|>" +
			llamaTurn("system", "Cutting Knowledge Date: December 2023\nToday Date: "+date+"\n\nYou are helpful.") +
			llamaTurn("user", "Hello there") +
			llamaTurn("assistant", "Hi! How can I help?") +
			llamaTurn("user", "What is 2+2?") +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"
	}
	chatml := "<|im_start|>system\nYou are helpful.<|im_end|>\n" +
		"<|im_start|>user\nHello there<|im_end|>\n" +
		"<|im_start|>assistant\nHi! How can I help?<|im_end|>\n" +
		"<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
		"<|im_start|>assistant\n"
	thinking := []Message{
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "<think>\nhmm\n</think>\n\nHello!"},
		{Role: "user", Content: "Bye"},
	}
	tests := []struct {
		name     string
		template string
		messages []Message
		bos, eos string
		agp      bool
		extra    map[string]any
		want     string
	}{
		{
			// Llama 3.1/3.3 fix date_string to "26 Jul 2024" when it is not given.
			name: "llama3.1", template: "meta-llama-Llama-3.1-8B-Instruct.jinja",
			messages: basicConversation(), bos: "<|begin_of_text|>", agp: true,
			want: llamaBasic("26 Jul 2024"),
		},
		{
			name: "llama3.3", template: "meta-llama-Llama-3.3-70B-Instruct.jinja",
			messages: basicConversation(), bos: "<|begin_of_text|>", agp: true,
			want: llamaBasic("26 Jul 2024"),
		},
		{
			// Llama 3.2 calls strftime_now("%d %b %Y").
			name: "llama3.2", template: "meta-llama-Llama-3.2-3B-Instruct.jinja",
			messages: basicConversation(), bos: "<|begin_of_text|>", agp: true,
			want: llamaBasic("07 Mar 2025"),
		},
		{
			name: "llama3.1 date_string", template: "meta-llama-Llama-3.1-8B-Instruct.jinja",
			messages: basicConversation(), bos: "<|begin_of_text|>", agp: true,
			extra: map[string]any{"date_string": "01 Jan 2030"},
			want:  llamaBasic("01 Jan 2030"),
		},
		{
			// No system message: Llama 3 still writes the header with an empty system text.
			name: "llama3.2 no system, no generation prompt", template: "meta-llama-Llama-3.2-3B-Instruct.jinja",
			messages: []Message{{Role: "user", Content: "  Hi  "}}, bos: "<|begin_of_text|>",
			want: "<|begin_of_text|>" +
				llamaTurn("system", "Cutting Knowledge Date: December 2023\nToday Date: 07 Mar 2025\n\n") +
				llamaTurn("user", "Hi"),
		},
		{
			name: "qwen2.5", template: "Qwen-Qwen2.5-7B-Instruct.jinja",
			messages: basicConversation(), agp: true, want: chatml,
		},
		{
			// Without a system message Qwen2.5 inserts its default one.
			name: "qwen2.5 default system", template: "Qwen-Qwen2.5-7B-Instruct.jinja",
			messages: []Message{{Role: "user", Content: "Hi"}}, agp: true,
			want: "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "qwen3", template: "Qwen-Qwen3-0.6B.jinja",
			messages: basicConversation(), agp: true, want: chatml,
		},
		{
			// Qwen3 drops past reasoning and, with enable_thinking=false, opens an empty think block.
			name: "qwen3 no thinking", template: "Qwen-Qwen3-0.6B.jinja",
			messages: thinking, agp: true, extra: map[string]any{"enable_thinking": false},
			want: "<|im_start|>user\nHi<|im_end|>\n" +
				"<|im_start|>assistant\nHello!<|im_end|>\n" +
				"<|im_start|>user\nBye<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			// Nemo puts the system text into the last user turn and has no generation prompt.
			name: "mistral-nemo", template: "mistralai-Mistral-Nemo-Instruct-2407.jinja",
			messages: basicConversation(), bos: "<s>", eos: "</s>", agp: true,
			want: "<s>[INST]Hello there[/INST]Hi! How can I help?</s>[INST]You are helpful.\n\nWhat is 2+2?[/INST]",
		},
		{
			name: "phi-3.5", template: "microsoft-Phi-3.5-mini-instruct.jinja",
			messages: basicConversation(), eos: "<|endoftext|>", agp: true,
			want: "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHello there<|end|>\n" +
				"<|assistant|>\nHi! How can I help?<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n",
		},
		{
			// Without a generation prompt Phi-3.5 ends with the EOS token.
			name: "phi-3.5 no generation prompt", template: "microsoft-Phi-3.5-mini-instruct.jinja",
			messages: []Message{{Role: "user", Content: "Hi"}}, eos: "<|endoftext|>",
			want: "<|user|>\nHi<|end|>\n<|endoftext|>",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := loadTemplate(t, tc.template)
			got, err := tmpl.Render(Input{
				Messages: tc.messages, AddGenerationPrompt: tc.agp,
				BOSToken: tc.bos, EOSToken: tc.eos, Extra: tc.extra, Now: fixedNow,
			})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tc.want {
				t.Errorf("Render mismatch\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

// TestToolRenders checks the tool definitions and a tool-call round trip.
func TestToolRenders(t *testing.T) {
	toolJSON := `{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city.", ` +
		`"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, ` +
		`"days": {"type": "integer"}}, "required": ["city"]}}}`
	toolJSONIndented := `{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {
                    "type": "string",
                    "description": "City name"
                },
                "days": {
                    "type": "integer"
                }
            },
            "required": [
                "city"
            ]
        }
    }
}`
	tests := []struct {
		name, template string
		want           string
	}{
		{
			name: "qwen2.5", template: "Qwen-Qwen2.5-7B-Instruct.jinja",
			want: "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + toolJSON + "\n</tools>\n\n" +
				"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
				"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nWeather in Paris & <Lyon>?<|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\nIt is 21°C.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			// Llama 3.1 puts tools (tojson(indent=4), keys in the client's order, no HTML
			// escaping) into the first user turn; a tool result string is itself JSON-quoted.
			name: "llama3.1", template: "meta-llama-Llama-3.1-8B-Instruct.jinja",
			want: "<s>" + llamaTurn("system", "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful.") +
				llamaTurn("user", "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n"+
					`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.`+"\n\n"+
					toolJSONIndented+"\n\nWeather in Paris & <Lyon>?") +
				llamaTurn("assistant", `{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}`) +
				llamaTurn("ipython", `"{\"temp\": 21}"`) +
				llamaTurn("assistant", "It is 21°C.") +
				llamaTurn("user", "Thanks!") +
				"<|start_header_id|>assistant<|end_header_id|>\n\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := loadTemplate(t, tc.template)
			got, err := tmpl.Render(Input{
				Messages: toolConversation(), Tools: []map[string]any{weatherTool()},
				AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>", Now: fixedNow,
			})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tc.want {
				t.Errorf("Render mismatch\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

// TestHermesToolJSON checks that the Hermes tool_use template shows the tool as JSON.
func TestHermesToolJSON(t *testing.T) {
	tmpl := loadTemplate(t, "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")
	out, err := tmpl.Render(Input{
		Messages: basicConversation(), Tools: []map[string]any{weatherTool()}, AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}`
	if !strings.Contains(out, want) || !strings.Contains(out, `{"type": "function", "function": {"name": "get_weather"`) {
		t.Errorf("tool JSON missing from:\n%s", out)
	}
}
