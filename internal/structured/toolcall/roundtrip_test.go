package toolcall

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// weatherTools are the functions the round-trip conversations offer.
func weatherTools() []map[string]any {
	fn := func(name, desc string, props map[string]any) map[string]any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc,
			"parameters": map[string]any{"type": "object", "properties": props}}}
	}
	return []map[string]any{
		fn("get_weather", "Weather forecast for a city.", map[string]any{
			"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}),
		fn("get_time", "The local time in a time zone.", map[string]any{"tz": map[string]any{"type": "string"}}),
	}
}

// toolsOf is weatherTools as the parser takes them.
func toolsOf(maps []map[string]any) []Tool {
	var out []Tool
	for _, m := range maps {
		fn := m["function"].(map[string]any)
		out = append(out, Tool{Name: fn["name"].(string), Parameters: fn["parameters"].(map[string]any)})
	}
	return out
}

// wantCalls are the calls the assistant turn of the round trip makes (the first only, for
// templates that render one call a turn).
var wantCalls = []Call{
	{ID: "abcdefghi", Name: "get_weather", Arguments: `{"city": "Paris", "days": 3}`},
	{ID: "jklmnopqr", Name: "get_time", Arguments: `{"tz": "Europe/Paris"}`},
}

// roundTrips are, per parser, the shared templates whose rendering of an assistant turn with
// tool calls is what that family's models write, and how many calls a turn may hold.
var roundTrips = []struct {
	parser, template string
	calls            int
}{
	{Hermes, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", 2},
	{Hermes, "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", 2},
	{Hermes, "Qwen-Qwen2.5-7B-Instruct.jinja", 2},
	{Hermes, "Qwen-Qwen3-0.6B.jinja", 2},
	{Hermes, "Qwen-QwQ-32B.jinja", 2},
	{Hermes, "ibm-granite-granite-4.0.jinja", 2},
	{Llama3JSON, "meta-llama-Llama-3.1-8B-Instruct.jinja", 1},
	{Llama3JSON, "meta-llama-Llama-3.2-3B-Instruct.jinja", 1},
	{Llama3JSON, "meta-llama-Llama-3.3-70B-Instruct.jinja", 1},
	{Mistral, "mistralai-Mistral-Nemo-Instruct-2407.jinja", 2},
	{Mistral, "Mistral-Small-3.2-24B-Instruct-2506.jinja", 2},
	{Mistral, "unsloth-mistral-Devstral-Small-2507.jinja", 2},
	{Mistral, "mistralai-Ministral-3-14B-Reasoning-2512.jinja", 2},
	{Qwen3Coder, "Qwen3-Coder.jinja", 2},
	{Qwen3Coder, "Qwen3.5-4B.jinja", 2},
	{DeepSeekV3, "deepseek-ai-DeepSeek-V3.1.jinja", 2},
	{DeepSeekV3, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", 2},
	{DeepSeekV3, "llama-cpp-deepseek-r1.jinja", 2},
	{FunctionaryV31, "meetkai-functionary-medium-v3.1.jinja", 2},
	{CommandR, "CohereForAI-c4ai-command-r-plus-tool_use.jinja", 2},
	{CommandR7B, "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", 2},
	{KimiK2, "Kimi-K2-Instruct.jinja", 2},
	{KimiK2, "moonshotai-Kimi-K2.jinja", 2},
	{GLM45, "GLM-4.6.jinja", 2},
	{GLM45, "GLM-4.7-Flash.jinja", 2},
	{OpenAI, "openai-gpt-oss-120b.jinja", 1},
	{Hermes, "Bielik-11B-v3.0-Instruct.jinja", 2},
	{Hermes, "MiMo-VL.jinja", 2},
	{Hermes, "Reka-Edge.jinja", 2},
	{Hermes, "ibm-granite-granite-4.1.jinja", 2},
	{Apriel, "unsloth-Apriel-1.5.jinja", 2},
	{SeedOSS, "ByteDance-Seed-OSS.jinja", 2},
	{Qwen3Coder, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", 2},
	{Qwen3Coder, "StepFun3.5-Flash.jinja", 2},
	{Qwen3Coder, "stepfun-ai-Step-3.5-Flash.jinja", 2},
	{KimiK2, "Kimi-K2-Thinking.jinja", 2},
}

// renderedReply renders the conversation up to the assistant's tool-call turn (with its
// reasoning, for templates that render it) through the template with and without that
// turn, and returns what the turn adds: the text the model writes (and the end of its turn).
func renderedReply(t *testing.T, src string, calls []Call, reasoning string) string {
	t.Helper()
	tmpl, err := chat.New(src)
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	user := chat.Message{Role: "user", Content: "What is the weather in Paris, and the time?"}
	var tcs []chat.ToolCall
	for _, c := range calls {
		tcs = append(tcs, chat.ToolCall{ID: c.ID, Type: "function", Function: chat.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
	}
	assistant := chat.Message{Role: "assistant", Content: "", ToolCalls: tcs, ReasoningContent: reasoning}
	// A tool result after the turn keeps templates that treat a last assistant turn
	// specially (gpt-oss drops its calls) rendering it as history.
	result := chat.Message{Role: "tool", Content: `{"temp": 21}`, ToolCallID: calls[0].ID, Name: calls[0].Name}
	in := chat.Input{Tools: weatherTools(), BOSToken: "<s>", EOSToken: "</s>", Now: now}
	if reasoning != "" {
		in.Extra = map[string]any{"enable_thinking": true} // the prompt leaves the thinking to the model
	}
	in.Messages, in.AddGenerationPrompt = []chat.Message{user}, true
	prompt, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Messages, in.AddGenerationPrompt = []chat.Message{user, assistant, result}, false
	whole, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	reply, ok := strings.CutPrefix(whole, prompt)
	if !ok {
		// Some templates' generation prompt is not how a turn starts in history (gpt-oss
		// writes the channel, Command-R a header): cut at the common prefix.
		n := 0
		for n < len(prompt) && n < len(whole) && prompt[n] == whole[n] {
			n++
		}
		n = strings.LastIndexAny(whole[:n], ">\n") + 1 // not inside a marker
		reply = whole[n:]
	}
	return reply
}

// TestRoundTrip renders an assistant turn with tool calls through each family's real
// templates and parses the rendering back: the calls come back with their names and
// arguments (as JSON values), and no call syntax is left in the content.
func TestRoundTrip(t *testing.T) {
	dir := testdata.Path(t, "chat_templates")
	for _, rt := range roundTrips {
		t.Run(rt.template, func(t *testing.T) {
			b, err := os.ReadFile(dir + "/" + rt.template)
			if err != nil {
				t.Fatal(err)
			}
			src := string(b)
			if got := Detect(src); got != rt.parser {
				t.Errorf("Detect = %q, want %q", got, rt.parser)
			}
			calls := wantCalls[:rt.calls]
			reply := renderedReply(t, src, calls, "")
			content, got := parseAll(t, rt.parser, reply, toolsOf(weatherTools()))
			t.Logf("reply %q -> content %q, calls %+v", reply, content, got)
			checkCalls(t, got, calls)
			if strings.Contains(content, "Paris") {
				t.Errorf("content %q still holds a call's arguments", content)
			}
			// The same text streamed a byte at a time parses the same.
			checkStreamed(t, rt.parser, reply, toolsOf(weatherTools()))
		})
	}
}

// parseAll parses text fed at once, returning the content and the calls.
func parseAll(t testing.TB, name, text string, tools []Tool) (string, []Call) {
	t.Helper()
	p, err := New(name, Options{Tools: tools, NewID: counterIDs()})
	if err != nil {
		t.Fatal(err)
	}
	var content strings.Builder
	for _, e := range append(p.Feed(text), p.Finish()...) {
		if e.Kind == Content {
			content.WriteString(e.Text)
		}
	}
	return content.String(), p.Calls()
}

// counterIDs returns an id maker counting "id0", "id1", ...
func counterIDs() func() string {
	n := 0
	return func() string {
		n++
		return "id" + string(rune('0'+n-1))
	}
}

// checkCalls compares calls by name and arguments as JSON values.
func checkCalls(t testing.TB, got, want []Call) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d calls %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i].Name != want[i].Name {
			t.Errorf("call %d: name %q, want %q", i, got[i].Name, want[i].Name)
		}
		var g, w any
		if err := json.Unmarshal([]byte(got[i].Arguments), &g); err != nil {
			t.Errorf("call %d: arguments %q are not JSON: %v", i, got[i].Arguments, err)
			continue
		}
		json.Unmarshal([]byte(want[i].Arguments), &w)
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			t.Errorf("call %d: arguments %s, want %s", i, gb, wb)
		}
	}
}

// TestRoundTripReasoning renders an assistant turn with reasoning and calls through the
// templates that write the reasoning into the turn, and parses it back: the reasoning comes
// back as reasoning, the calls as calls, and nothing as content.
func TestRoundTripReasoning(t *testing.T) {
	const reasoning = "I will look up the weather, then the time."
	for _, rt := range []struct{ parser, template string }{
		{CommandR7B, "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"},
	} {
		t.Run(rt.template, func(t *testing.T) {
			b, err := os.ReadFile(testdata.Path(t, "chat_templates") + "/" + rt.template)
			if err != nil {
				t.Fatal(err)
			}
			reply := renderedReply(t, string(b), wantCalls, reasoning)
			if !strings.Contains(reply, reasoning) {
				t.Fatalf("the template did not render the reasoning: %q", reply)
			}
			// The turn's own text: up to the end of the turn.
			reply, _, _ = strings.Cut(reply, "<|END_OF_TURN_TOKEN|>")
			out, calls := gather(t, rt.parser, reply, toolsOf(weatherTools()), func(int) bool { return false })
			t.Logf("reply %q -> %+v", reply, out)
			if out.reasoning != reasoning || strings.TrimSpace(out.content) != "" {
				t.Errorf("reasoning %q, content %q; want %q and none", out.reasoning, out.content, reasoning)
			}
			checkCalls(t, calls, wantCalls)
			checkStreamed(t, rt.parser, reply, toolsOf(weatherTools()))
		})
	}
}
