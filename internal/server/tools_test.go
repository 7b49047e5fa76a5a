package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// scriptedFamily is a tool-calling family: one of its real chat templates, a reply as its
// models write it, and what the reply parses into.
type scriptedFamily struct {
	Name     string       `json:"name"`
	template string       // a file in the shared chat_templates
	reply    string       // the model's output, forced token by token
	Content  string       `json:"content"`
	Calls    []scriptCall `json:"calls"`
	// Parallel: the family writes more than one call a turn (the reply holds two).
	Parallel bool `json:"parallel"`
	// Reasoning is the thinking the parser separates.
	Reasoning string `json:"reasoning"`
}

// scriptCall is a call a scripted reply makes.
type scriptCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

var (
	parisCall = scriptCall{Name: "get_weather", Arguments: map[string]any{"city": "Paris", "days": 3.0}}
	timeCall  = scriptCall{Name: "get_time", Arguments: map[string]any{"tz": "Europe/Paris"}}
	twoCalls  = []scriptCall{parisCall, timeCall}
)

// scriptedFamilies are the families of the tool-call parsers, each with a reply in its syntax.
var scriptedFamilies = []scriptedFamily{
	{Name: "hermes", template: "Qwen-Qwen2.5-7B-Instruct.jinja", Parallel: true, Content: "Let me check.\n",
		reply: "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>", Calls: twoCalls},
	{Name: "llama3_json", template: "meta-llama-Llama-3.2-3B-Instruct.jinja",
		reply: `{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}`, Calls: []scriptCall{parisCall}},
	{Name: "mistral", template: "Mistral-Small-3.2-24B-Instruct-2506.jinja", Parallel: true,
		reply: `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[ARGS]{"tz": "Europe/Paris"}`, Calls: twoCalls},
	{Name: "mistral_array", template: "mistralai-Mistral-Nemo-Instruct-2407.jinja", Parallel: true,
		reply: `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]`, Calls: twoCalls},
	{Name: "qwen3_coder", template: "Qwen3-Coder.jinja", Parallel: true,
		reply: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\nEurope/Paris\n</parameter>\n</function>\n</tool_call>", Calls: twoCalls},
	{Name: "deepseek_v3", template: "deepseek-ai-DeepSeek-V3.1.jinja", Parallel: true,
		reply: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"tz": "Europe/Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`, Calls: twoCalls},
	{Name: "deepseek_r1", template: "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
		reply: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", Calls: []scriptCall{parisCall}},
	{Name: "granite", template: "ibm-granite-granite-3.3-2B-Instruct.jinja", Parallel: true,
		reply: `<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]`, Calls: twoCalls},
	{Name: "functionary_v3_1", template: "meetkai-functionary-medium-v3.1.jinja", Parallel: true,
		reply: `<function=get_weather>{"city": "Paris", "days": 3}</function><function=get_time>{"tz": "Europe/Paris"}</function>`, Calls: twoCalls},
	{Name: "functionary_v3_2", template: "meetkai-functionary-medium-v3.2.jinja", Parallel: true, Content: "Looking it up.",
		reply: "all\nLooking it up.>>>get_weather\n{\"city\": \"Paris\", \"days\": 3}>>>get_time\n{\"tz\": \"Europe/Paris\"}", Calls: twoCalls},
	{Name: "command_r", template: "CohereForAI-c4ai-command-r-plus-tool_use.jinja", Parallel: true,
		reply: "Action:\n```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        \"parameters\": {\"city\": \"Paris\", \"days\": 3}\n    },\n    {\n        \"tool_name\": \"get_time\",\n        \"parameters\": {\"tz\": \"Europe/Paris\"}\n    }\n]```", Calls: twoCalls},
	{Name: "command_r7b", template: "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", Parallel: true, Reasoning: "I will look up the weather and the time.",
		reply: "<|START_THINKING|>I will look up the weather and the time.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}\n]<|END_ACTION|>", Calls: twoCalls},
	{Name: "kimi_k2", template: "Kimi-K2-Instruct.jinja", Parallel: true,
		reply: `<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{"tz": "Europe/Paris"}<|tool_call_end|><|tool_calls_section_end|>`, Calls: twoCalls},
	{Name: "glm45", template: "GLM-4.6.jinja", Parallel: true,
		reply: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time\n<arg_key>tz</arg_key>\n<arg_value>Europe/Paris</arg_value>\n</tool_call>", Calls: twoCalls},
	{Name: "seed_oss", template: "ByteDance-Seed-OSS.jinja", Parallel: true,
		reply: "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3</parameter>\n</function>\n</seed:tool_call>", Calls: []scriptCall{parisCall}},
	{Name: "apriel", template: "unsloth-Apriel-1.5.jinja", Parallel: true,
		reply: `<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]</tool_calls>`, Calls: twoCalls},
	{Name: "openai", template: "openai-gpt-oss-120b.jinja", Reasoning: "The user wants the weather.",
		reply: "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}<|call|>", Calls: []scriptCall{parisCall}},
}

// testTools are the tools the scripted requests offer, as the client sends them.
func testTools() []map[string]any {
	fn := func(name string, props map[string]any) map[string]any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": "Look up " + name,
			"parameters": map[string]any{"type": "object", "properties": props}}}
	}
	return []map[string]any{
		fn("get_weather", map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}),
		fn("get_time", map[string]any{"tz": map[string]any{"type": "string"}}),
	}
}

// scriptedContextLen is the scripted engine's context: room for templates that render the
// tools at length.
const scriptedContextLen = 8192

// forcedReply is a processor that allows exactly one token at each step: the next of a
// scripted reply, then end of sequence. With it the tiny model writes the reply, through
// the real engine, detokenizer and server.
type forcedReply struct {
	tokens []int32
	eos    int32
	vocab  int
	pos    int
	mask   sample.Mask
}

// Accept moves past the tokens the model wrote, which must be the script's.
func (f *forcedReply) Accept(tokens []int32) error {
	for _, t := range tokens {
		want := f.eos
		if f.pos < len(f.tokens) {
			want = f.tokens[f.pos]
		}
		if t != want {
			return fmt.Errorf("forced reply: token %d at %d, want %d", t, f.pos, want)
		}
		f.pos++
	}
	return nil
}

// Rollback forgets the last n tokens.
func (f *forcedReply) Rollback(n int) { f.pos -= n }

// Clone copies the processor.
func (f *forcedReply) Clone() sample.Stateful { c := *f; c.mask = nil; return &c }

// Mask allows the next token of the script only.
func (f *forcedReply) Mask() sample.Mask {
	next := f.eos
	if f.pos < len(f.tokens) {
		next = f.tokens[f.pos]
	}
	f.mask = sample.NewMask(f.vocab, next)
	return f.mask
}

// byteTokens are text's tokens in the synthesized byte vocabulary: byte b is token 3+b, so
// any text, special-looking or not, decodes back exactly.
func byteTokens(text string) []int32 {
	ids := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = 3 + int32(text[i])
	}
	return ids
}

// scriptedServer starts a test server on the tiny model with family f's chat template, its
// replies to requests with tools forced to f's reply through Config.ToolGrammar (the seam a
// grammar plugs into).
func scriptedServer(t testing.TB, f scriptedFamily, parser string) *testEnv {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(testdata.Path(t, "chat_templates"), f.template))
	if err != nil {
		t.Fatal(err)
	}
	eng := openTinyEngine(t, kvasir.Options{Threads: 1, KVCacheMemory: 32 << 20, MaxNumSeqs: 4}, quant.F32, scriptedContextLen, string(src))
	if got, err := eng.Detokenize(byteTokens(f.reply), false); err != nil || got != f.reply {
		t.Fatalf("the byte tokens of the reply decode to %q (%v), not the reply", got, err)
	}
	cfg := Config{ModelNames: []string{testModelName}, Metrics: NewMetrics(testModelName), ToolCallParser: parser,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ChatTemplateWorkers: 1,
		ToolGrammar: func(ToolChoice) ([]kvasir.Processor, error) {
			return []kvasir.Processor{&forcedReply{tokens: byteTokens(f.reply), eos: 2, vocab: eng.VocabSize()}}, nil
		}}
	srv, err := New(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &testEnv{eng: eng, srv: srv, ts: ts}
}

// toolsBody is a chat request with the test tools.
func toolsBody(extra map[string]any) map[string]any {
	body := map[string]any{"model": testModelName, "messages": []map[string]any{{"role": "user", "content": "Weather and time in Paris?"}},
		"tools": testTools(), "max_tokens": 600}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// checkToolCalls compares a message's tool calls with the family's.
func checkToolCalls(t testing.TB, got []toolCallOut, want []scriptCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tool calls %+v, want %d", len(got), got, len(want))
	}
	ids := map[string]bool{}
	for i, c := range got {
		var args map[string]any
		if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
			t.Errorf("call %d: arguments %q: %v", i, c.Function.Arguments, err)
		}
		if c.Index != i || c.Type != "function" || c.ID == "" || ids[c.ID] || c.Function.Name != want[i].Name || fmt.Sprint(args) != fmt.Sprint(want[i].Arguments) {
			t.Errorf("call %d: %+v (arguments %v), want %+v", i, c, args, want[i])
		}
		ids[c.ID] = true
	}
}

// TestToolCallsScripted drives every family's server with a scripted reply, not streamed and
// streamed, and checks message.tool_calls, the deltas and finish_reason.
func TestToolCallsScripted(t *testing.T) {
	for _, f := range scriptedFamilies {
		t.Run(f.Name, func(t *testing.T) {
			env := scriptedServer(t, f, "")
			var res chatResponse
			env.post(t, "/v1/chat/completions", toolsBody(nil), &res)
			c := res.Choices[0]
			checkToolCalls(t, c.Message.ToolCalls, f.Calls)
			if c.Message.text() != f.Content || c.Message.ReasoningContent != f.Reasoning || c.FinishReason == nil || *c.FinishReason != "tool_calls" {
				t.Errorf("content %q, reasoning %q, finish %v; want %q, %q, tool_calls", c.Message.text(), c.Message.ReasoningContent, c.FinishReason, f.Content, f.Reasoning)
			}
			if f.Content == "" && c.Message.Content != nil {
				t.Errorf("content %q, want null beside the calls", *c.Message.Content)
			}

			events := env.stream(t, "/v1/chat/completions", toolsBody(map[string]any{"stream": true}))
			var content, reasoning string
			var calls []toolCallOut
			var finish string
			pieces := 0
			for _, ev := range events[:len(events)-1] {
				var chunk chatResponse
				if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
					t.Fatalf("chunk %s: %v", ev, err)
				}
				d := chunk.Choices[0].Delta
				if d.Content != nil {
					content += *d.Content
				}
				reasoning += d.ReasoningContent
				for _, tc := range d.ToolCalls {
					if tc.Index == len(calls) {
						if tc.ID == "" || tc.Function.Name == "" {
							t.Errorf("call %d begins without id or name: %+v", tc.Index, tc)
						}
						calls = append(calls, tc)
						continue
					}
					if tc.Index != len(calls)-1 || tc.ID != "" || tc.Function.Name != "" {
						t.Fatalf("delta %+v after %d calls", tc, len(calls))
					}
					calls[tc.Index].Function.Arguments += tc.Function.Arguments
					pieces++
				}
				if fr := chunk.Choices[0].FinishReason; fr != nil {
					finish = *fr
				}
			}
			checkToolCalls(t, calls, f.Calls)
			if content != f.Content || reasoning != f.Reasoning || finish != "tool_calls" {
				t.Errorf("streamed content %q, reasoning %q, finish %q; want %q, %q, tool_calls", content, reasoning, finish, f.Content, f.Reasoning)
			}
			if pieces < len(f.Calls) {
				t.Errorf("%d argument pieces after the calls' starts: the arguments did not stream", pieces)
			}
		})
	}
}

// TestToolChoice checks tool_choice and parallel_tool_calls on a Hermes server: none parses
// nothing, parallel_tool_calls false keeps the first call, and a named function must be
// among the tools; without a grammar required and named are refused.
func TestToolChoice(t *testing.T) {
	f := scriptedFamilies[0]
	env := scriptedServer(t, f, "")
	var res chatResponse
	env.post(t, "/v1/chat/completions", toolsBody(map[string]any{"parallel_tool_calls": false}), &res)
	checkToolCalls(t, res.Choices[0].Message.ToolCalls, f.Calls[:1])

	// tool_choice none: no grammar, no parsing; the tiny model writes what it writes.
	var none chatResponse
	env.post(t, "/v1/chat/completions", toolsBody(map[string]any{"tool_choice": "none", "max_tokens": 4}), &none)
	if c := none.Choices[0]; len(c.Message.ToolCalls) != 0 || *c.FinishReason != "length" {
		t.Errorf("tool_choice none: %+v", c)
	}

	for name, tc := range map[string]struct {
		body        map[string]any
		param, text string
	}{
		"named function not among the tools": {toolsBody(map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}}),
			"tool_choice.function.name", "not among the tools"},
		"tool without a name": {toolsBody(map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{}}}}),
			"tools[0].function.name", "needs a name"},
		"tool of another type": {toolsBody(map[string]any{"tools": []any{map[string]any{"type": "code"}}}), "tools[0].type", `must be \"function\"`},
	} {
		t.Run(name, func(t *testing.T) {
			b, _ := json.Marshal(tc.body)
			status, body := env.do(t, http.MethodPost, "/v1/chat/completions", b)
			if status != http.StatusBadRequest || !strings.Contains(string(body), tc.param) || !strings.Contains(string(body), tc.text) {
				t.Errorf("status %d: %s; want 400 naming %s: %s", status, body, tc.param, tc.text)
			}
		})
	}

	// The built-in grammar holds required and named choices to calls whose arguments are
	// instances of the tools' schemas, even on a random model at temperature 1; a parameter
	// a text-parameter family cannot write (qwen3_coder's raw strings take no format) is a
	// 400 naming the keyword.
	plain := newTestEnv(t, kvasir.Options{}, Config{ToolCallParser: "hermes"})
	bounded := []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"enum": []string{"Paris", "Oslo"}}, "days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7}},
			"required":   []string{"city", "days"}}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}},
	}
	for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
		var got chatResponse
		plain.post(t, "/v1/chat/completions", toolsBody(map[string]any{"tools": bounded, "tool_choice": choice, "temperature": 1, "n": 4, "max_tokens": 120,
			"parallel_tool_calls": false}), &got)
		for i, c := range got.Choices {
			if len(c.Message.ToolCalls) != 1 || deref(c.FinishReason) != "tool_calls" {
				t.Errorf("tool_choice %v, choice %d: %+v (finish %s)", choice, i, c.Message, deref(c.FinishReason))
				continue
			}
			call := c.Message.ToolCalls[0].Function
			var args struct {
				City *string `json:"city"`
				Days *int    `json:"days"`
			}
			dec := json.NewDecoder(strings.NewReader(call.Arguments))
			dec.DisallowUnknownFields()
			err := dec.Decode(&args)
			switch {
			case call.Name == "get_time" && choice == "required" && call.Arguments == "{}":
			case call.Name != "get_weather" || err != nil || args.City == nil || (*args.City != "Paris" && *args.City != "Oslo") ||
				args.Days == nil || *args.Days < 1 || *args.Days > 7:
				t.Errorf("tool_choice %v, choice %d: call %s(%s): %v", choice, i, call.Name, call.Arguments, err)
			}
		}
	}
	coder := newTestEnv(t, kvasir.Options{}, Config{ToolCallParser: "qwen3_coder"})
	dated := []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"d": map[string]any{"type": "string", "format": "date"}}}}}}
	b, _ := json.Marshal(toolsBody(map[string]any{"tool_choice": "required", "tools": dated}))
	if status, body := coder.do(t, http.MethodPost, "/v1/chat/completions", b); status != http.StatusBadRequest || !strings.Contains(string(body), `\"format\"`) {
		t.Errorf("required with a raw-text parameter qwen3_coder cannot constrain: status %d: %s", status, body)
	}
	plain.post(t, "/v1/chat/completions", toolsBody(map[string]any{"tool_choice": "auto", "max_tokens": 3}), &res)
	if len(res.Choices) != 1 {
		t.Errorf("auto: %+v", res)
	}
	if _, err := New(plain.eng, Config{ToolCallParser: "nope"}); err == nil || !strings.Contains(err.Error(), "hermes") {
		t.Errorf("New with an unknown parser: %v", err)
	}

	// A grammar that cannot be built from the tools is the request's 400.
	refusing := newTestEnv(t, kvasir.Options{}, Config{ToolCallParser: "hermes", ToolGrammar: func(c ToolChoice) ([]kvasir.Processor, error) {
		if c.Mode != "required" || c.Parser != "hermes" || len(c.Tools) != 2 || !c.Parallel {
			t.Errorf("ToolGrammar given %+v", c)
		}
		return nil, fmt.Errorf("tools[0].function.parameters: unsupported keyword %q", "not")
	}})
	b, _ = json.Marshal(toolsBody(map[string]any{"tool_choice": "required"}))
	if status, body := refusing.do(t, http.MethodPost, "/v1/chat/completions", b); status != http.StatusBadRequest || !strings.Contains(string(body), "unsupported keyword") {
		t.Errorf("a grammar that fails: status %d: %s", status, body)
	}
}

// TestToolChoiceRequiredEveryFamily holds a random model at temperature 1 to tool_choice
// "required" in every family's syntax: each reply must end in calls (finish_reason
// "tool_calls") of the offered functions whose arguments are instances of their schemas.
func TestToolChoiceRequiredEveryFamily(t *testing.T) {
	for _, parser := range toolcall.Names() {
		t.Run(parser, func(t *testing.T) {
			env := randomToolServer(t, parser, nil)
			var got chatResponse
			env.post(t, "/v1/chat/completions", toolsBody(map[string]any{"tools": boundedTools(), "tool_choice": "required", "temperature": 1, "n": 2, "max_tokens": 1500}), &got)
			for i, c := range got.Choices {
				if err := boundedCalls(c); err != nil {
					t.Errorf("choice %d: %v", i, err)
				}
			}
		})
	}
}

// boundedTools are a function whose arguments the schema bounds (a city of two, 1 to 7
// days) and one without arguments.
func boundedTools() []any {
	return []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris", "Oslo"}}, "days": map[string]any{"type": "integer", "minimum": 1, "maximum": 7}},
			"required":   []string{"city", "days"}}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}},
	}
}

// boundedCalls checks that a choice made calls of boundedTools whose arguments are
// instances of their schemas, and finished for them.
func boundedCalls(c chatChoice) error {
	if len(c.Message.ToolCalls) == 0 || deref(c.FinishReason) != "tool_calls" {
		return fmt.Errorf("no tool calls: %+v (finish %s)", c.Message, deref(c.FinishReason))
	}
	for _, tc := range c.Message.ToolCalls {
		call := tc.Function
		var args struct {
			City *string `json:"city"`
			Days *int    `json:"days"`
		}
		dec := json.NewDecoder(strings.NewReader(call.Arguments))
		dec.DisallowUnknownFields()
		err := dec.Decode(&args)
		switch {
		case call.Name == "get_time" && strings.ReplaceAll(call.Arguments, " ", "") == "{}":
		case call.Name != "get_weather" || err != nil || args.City == nil || (*args.City != "Paris" && *args.City != "Oslo") ||
			args.Days == nil || *args.Days < 1 || *args.Days > 7:
			return fmt.Errorf("call %s(%s): %v", call.Name, call.Arguments, err)
		}
	}
	return nil
}

// TestToolChoiceAutoHoldsCallsFromTheTrigger: under tool_choice "auto" the reply is free
// text until it writes the mark a call begins with, and from there a call of the tools
// whose arguments fit their schemas (the lazy grammar). A forced prefix makes the random
// model write some text and the mark; without the lazy grammar the same replies make no
// valid call, so the test can fail.
func TestToolChoiceAutoHoldsCallsFromTheTrigger(t *testing.T) {
	for _, parser := range []string{toolcall.Hermes, toolcall.Mistral, toolcall.Qwen3Coder, toolcall.GLM45, toolcall.CommandR7B} {
		t.Run(parser, func(t *testing.T) {
			prefix := "Let me look that up.\n" + toolcall.Triggers(parser)[0]
			valid := 0
			for _, lazy := range []bool{true, false} {
				env := randomToolServer(t, parser, func(env *testEnv, c ToolChoice) ([]kvasir.Processor, error) {
					procs := []kvasir.Processor{&forcedPrefix{tokens: byteTokens(prefix), vocab: env.eng.VocabSize()}}
					if !lazy {
						return procs, nil
					}
					grammar, err := env.srv.toolGrammar(c)
					return append(procs, grammar...), err
				})
				var got chatResponse
				env.post(t, "/v1/chat/completions", toolsBody(map[string]any{"tools": boundedTools(), "tool_choice": "auto", "temperature": 1, "n": 2, "max_tokens": 1500}), &got)
				for i, c := range got.Choices {
					err := boundedCalls(c)
					if err == nil {
						valid++
					}
					if lazy && err != nil {
						t.Errorf("choice %d: %v", i, err)
					}
				}
			}
			if valid != 2 {
				t.Errorf("%d of 4 choices made valid calls, want the 2 with the lazy grammar", valid)
			}
		})
	}
}

// forcedPrefix is a processor that allows exactly the next token of a scripted prefix,
// then any token.
type forcedPrefix struct {
	tokens []int32
	pos    int
	vocab  int
}

// Accept moves past the tokens written.
func (f *forcedPrefix) Accept(tokens []int32) error { f.pos += len(tokens); return nil }

// Rollback forgets the last n tokens.
func (f *forcedPrefix) Rollback(n int) { f.pos -= n }

// Clone copies the processor.
func (f *forcedPrefix) Clone() sample.Stateful { c := *f; return &c }

// Mask allows the prefix's next token, or every token after the prefix.
func (f *forcedPrefix) Mask() sample.Mask {
	if f.pos >= len(f.tokens) {
		return nil
	}
	return sample.NewMask(f.vocab, f.tokens[f.pos])
}

// randomToolServer is a server of the tiny random model reading tool calls with parser,
// with the built-in tool_choice grammar (or grammar, when not nil) and a context with room for parallel calls spelled
// in the tiny vocabulary's bytes.
func randomToolServer(t *testing.T, parser string, grammar func(*testEnv, ToolChoice) ([]kvasir.Processor, error)) *testEnv {
	t.Helper()
	eng := openTinyEngine(t, kvasir.Options{Threads: 1, KVCacheMemory: 32 << 20, MaxNumSeqs: 4}, quant.F32, 2048, testChatTemplate)
	env := &testEnv{eng: eng}
	cfg := Config{ToolCallParser: parser, ModelNames: []string{testModelName}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ChatTemplateWorkers: 1}
	if grammar != nil {
		cfg.ToolGrammar = func(c ToolChoice) ([]kvasir.Processor, error) { return grammar(env, c) }
	}
	srv, err := New(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	env.srv, env.ts = srv, ts
	return env
}

// TestToolConversation sends a conversation with an assistant turn's tool_calls and a tool
// result: the template renders them (the Hermes template writes the call back as
// <tool_call> and the result as <tool_response>).
func TestToolConversation(t *testing.T) {
	env := scriptedServer(t, scriptedFamilies[0], "")
	msgs := []map[string]any{
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": `{"temp": 21}`},
	}
	var tok struct {
		Tokens []int32 `json:"tokens"`
	}
	env.post(t, "/tokenize", map[string]any{"messages": msgs, "tools": testTools()}, &tok)
	text, err := env.eng.Detokenize(tok.Tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<tool_call>`, `"name": "get_weather"`, `<tool_response>`, `{"temp": 21}`} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered prompt lacks %s:\n%s", want, text)
		}
	}
	var res chatResponse
	env.post(t, "/v1/chat/completions", toolsBody(map[string]any{"messages": msgs}), &res)
	checkToolCalls(t, res.Choices[0].Message.ToolCalls, scriptedFamilies[0].Calls)
}
