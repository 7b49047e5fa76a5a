package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// responseOut is a response as a client decodes it.
type responseOut struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Status             string            `json:"status"`
	Model              string            `json:"model"`
	Output             []json.RawMessage `json:"output"`
	PreviousResponseID *string           `json:"previous_response_id"`
	IncompleteDetails  *incompleteDetail `json:"incomplete_details"`
	Usage              responseUsage     `json:"usage"`
}

// outputItemOut is an output item of any type.
type outputItemOut struct {
	Type      string       `json:"type"`
	ID        string       `json:"id"`
	Status    string       `json:"status"`
	Role      string       `json:"role"`
	Content   []outputText `json:"content"`
	CallID    string       `json:"call_id"`
	Name      string       `json:"name"`
	Arguments string       `json:"arguments"`
}

// items decodes the output items.
func (r *responseOut) items(t testing.TB) []outputItemOut {
	t.Helper()
	out := make([]outputItemOut, len(r.Output))
	for i, raw := range r.Output {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("output[%d] %s: %v", i, raw, err)
		}
	}
	return out
}

// text is the text of the response's message items.
func (r *responseOut) text(t testing.TB) string {
	var b strings.Builder
	for _, it := range r.items(t) {
		if it.Type == "message" {
			for _, c := range it.Content {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// chatReply asks /v1/chat/completions for messages, greedy, and returns the reply and
// its finish_reason.
func chatReply(t testing.TB, env *testEnv, msgs []map[string]any, maxTokens int) (string, string) {
	t.Helper()
	var res chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"model": testModelName, "messages": msgs, "max_tokens": maxTokens, "temperature": 0}, &res)
	return res.Choices[0].Message.text(), *res.Choices[0].FinishReason
}

// TestResponsesText checks a text response against the chat completion of the same
// conversation (instructions as the system message), greedy: the same text, the response
// object's fields, and usage.
func TestResponsesText(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	want, finish := chatReply(t, env, []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}}, 8)
	var res responseOut
	env.post(t, "/v1/responses", map[string]any{"model": testModelName, "input": "Hello there", "instructions": "Be brief.",
		"max_output_tokens": 8, "temperature": 0}, &res)
	if got := res.text(t); got != want {
		t.Errorf("response text %q, chat reply %q", got, want)
	}
	items := res.items(t)
	if len(items) != 1 || items[0].Type != "message" || items[0].Role != "assistant" || items[0].Status != "completed" ||
		!strings.HasPrefix(items[0].ID, "msg_") || len(items[0].Content) != 1 || items[0].Content[0].Type != "output_text" {
		t.Errorf("output %s", res.Output)
	}
	if !strings.HasPrefix(res.ID, "resp_") || res.Object != "response" || res.Model != testModelName {
		t.Errorf("response %+v", res)
	}
	wantStatus := "completed"
	if finish == "length" {
		wantStatus = "incomplete"
		if res.IncompleteDetails == nil || res.IncompleteDetails.Reason != "max_output_tokens" {
			t.Errorf("incomplete_details %+v", res.IncompleteDetails)
		}
	}
	if res.Status != wantStatus {
		t.Errorf("status %q with finish_reason %q", res.Status, finish)
	}
	u := res.Usage
	if u.OutputTokens < 1 || u.OutputTokens > 8 || u.InputTokens < 1 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Errorf("usage %+v", u)
	}
}

// sseEvent is one event of a stream: its name and data.
type sseEvent struct {
	name string
	data responseEvent
	raw  string
}

// streamResponses posts a streaming request and reads its named events, checking that
// each names its type and that sequence numbers count from 0.
func streamResponses(t testing.TB, env *testEnv, body map[string]any) []sseEvent {
	t.Helper()
	body["stream"] = true
	b, _ := json.Marshal(body)
	res, err := env.ts.Client().Post(env.ts.URL+"/v1/responses", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, msg)
	}
	var events []sseEvent
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev := sseEvent{name: name, raw: strings.TrimPrefix(line, "data: ")}
			if err := json.Unmarshal([]byte(ev.raw), &ev.data); err != nil {
				t.Fatalf("event %s: %v", ev.raw, err)
			}
			if ev.data.Type != name || ev.data.SequenceNumber != len(events) {
				t.Errorf("event %d named %q: %s", len(events), name, ev.raw)
			}
			events = append(events, ev)
			name = ""
		case line != "":
			t.Fatalf("unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// eventTypes lists the events' types.
func eventTypes(events []sseEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.name
	}
	return out
}

// TestResponsesStream checks a streamed text response: the event sequence, deltas that add
// up to the text of the non-streamed response, and response.completed holding the same
// output.
func TestResponsesStream(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	body := func() map[string]any {
		return map[string]any{"model": testModelName, "input": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "input_text", "text": "Count"}}}},
			"max_output_tokens": 6, "temperature": 0}
	}
	var want responseOut
	env.post(t, "/v1/responses", body(), &want)
	events := streamResponses(t, env, body())
	types := eventTypes(events)
	n := len(types)
	if n < 9 {
		t.Fatalf("events %v", types)
	}
	head := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	tail := []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if fmt.Sprint(types[:4]) != fmt.Sprint(head) || fmt.Sprint(types[n-4:]) != fmt.Sprint(tail) {
		t.Errorf("events %v", types)
	}
	var text strings.Builder
	for _, e := range events[4 : n-4] {
		if e.name != "response.output_text.delta" || e.data.Delta == nil || e.data.ItemID == "" || *e.data.OutputIndex != 0 {
			t.Errorf("event %s", e.raw)
			continue
		}
		text.WriteString(*e.data.Delta)
	}
	if got, w := text.String(), want.text(t); got != w || *events[n-4].data.Text != w {
		t.Errorf("streamed text %q (done: %q), not streamed %q", got, *events[n-4].data.Text, w)
	}
	if s := events[0].data.Response.Status; s != "in_progress" {
		t.Errorf("response.created status %q", s)
	}
	final := events[n-1].data.Response
	if final.Status != want.Status || len(final.Output) != 1 || final.Usage == nil || final.Usage.OutputTokens != want.Usage.OutputTokens {
		t.Errorf("response.completed %s, want status %q and usage %+v", events[n-1].raw, want.Status, want.Usage)
	}
}

// TestResponsesConversation continues a response with previous_response_id and checks the
// reply equals the chat completion of the whole conversation; GET retrieves a stored
// response; store false keeps none.
func TestResponsesConversation(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var first responseOut
	env.post(t, "/v1/responses", map[string]any{"input": "Hi", "max_output_tokens": 4, "temperature": 0}, &first)
	var second responseOut
	env.post(t, "/v1/responses", map[string]any{"input": "And then?", "previous_response_id": first.ID, "max_output_tokens": 4, "temperature": 0}, &second)
	want, _ := chatReply(t, env, []map[string]any{{"role": "user", "content": "Hi"}, {"role": "assistant", "content": first.text(t)},
		{"role": "user", "content": "And then?"}}, 4)
	if got := second.text(t); got != want {
		t.Errorf("continued reply %q, chat reply %q", got, want)
	}
	if second.PreviousResponseID == nil || *second.PreviousResponseID != first.ID {
		t.Errorf("previous_response_id %v", second.PreviousResponseID)
	}
	status, body := env.do(t, http.MethodGet, "/v1/responses/"+second.ID, nil)
	var got responseOut
	if status != http.StatusOK || json.Unmarshal(body, &got) != nil || got.ID != second.ID || got.text(t) != second.text(t) {
		t.Errorf("GET: %d %s", status, body)
	}

	var unstored responseOut
	env.post(t, "/v1/responses", map[string]any{"input": "Hi", "max_output_tokens": 2, "store": false}, &unstored)
	status, body = env.do(t, http.MethodPost, "/v1/responses", []byte(`{"input":"x","previous_response_id":"`+unstored.ID+`"}`))
	if e := apiErrorOf(t, body); status != http.StatusNotFound || e["param"] != "previous_response_id" {
		t.Errorf("previous_response_id of an unstored response: %d %s", status, body)
	}
	if status, body := env.do(t, http.MethodGet, "/v1/responses/"+unstored.ID, nil); status != http.StatusNotFound {
		t.Errorf("GET of an unstored response: %d %s", status, body)
	}
}

// TestResponsesStoreBounded checks the store forgets the oldest responses beyond its
// count and byte budgets.
func TestResponsesStoreBounded(t *testing.T) {
	st := newResponseStore(3, 1<<20)
	var ids []string
	for i := 0; i < 5; i++ {
		r := &responseObject{ID: fmt.Sprint("resp_", i), Output: []any{}}
		st.put(r, nil)
		ids = append(ids, r.ID)
	}
	for i, id := range ids {
		if kept := st.get(id) != nil; kept != (i >= 2) {
			t.Errorf("response %d kept: %v", i, kept)
		}
	}
	small := newResponseStore(100, 2000)
	big := strings.Repeat("x", 900)
	for i := 0; i < 4; i++ {
		small.put(&responseObject{ID: fmt.Sprint("resp_", i), Output: []any{}}, []chatMessage{{Role: "user", Content: json.RawMessage(`"` + big + `"`)}})
	}
	if small.get("resp_0") != nil || small.get("resp_3") == nil || small.bytes > 2000 {
		t.Errorf("byte budget: %d bytes kept, first kept %v", small.bytes, small.get("resp_0") != nil)
	}
	small.put(&responseObject{ID: "huge", Output: []any{}}, []chatMessage{{Role: "user", Content: json.RawMessage(`"` + strings.Repeat("y", 3000) + `"`)}})
	if small.get("huge") != nil || small.get("resp_3") == nil {
		t.Error("a response larger than the budget was kept or evicted the others")
	}
}

// TestResponsesJSONSchema checks text.format json_schema holds the output to the schema.
func TestResponsesJSONSchema(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var res responseOut
	env.post(t, "/v1/responses", map[string]any{"input": "Yes or no?", "max_output_tokens": 10,
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "answer", "schema": map[string]any{"enum": []string{"yes", "no"}}}}}, &res)
	if got := res.text(t); got != `"yes"` && got != `"no"` {
		t.Errorf("constrained output %q", got)
	}
}

// TestResponsesToolCalls drives a scripted hermes server: function tools in the Responses
// form, the reply's calls as function_call items, not streamed and streamed; then the
// calls and their outputs sent back as input items render as the chat conversation does.
func TestResponsesToolCalls(t *testing.T) {
	f := scriptedFamilies[0] // hermes: content and two calls
	env := scriptedServer(t, f, "")
	var tools []map[string]any
	for _, tl := range testTools() {
		fn := tl["function"].(map[string]any)
		tools = append(tools, map[string]any{"type": "function", "name": fn["name"], "description": fn["description"], "parameters": fn["parameters"]})
	}
	body := func() map[string]any {
		return map[string]any{"model": testModelName, "input": "Weather and time in Paris?", "tools": tools, "max_output_tokens": 600}
	}
	var res responseOut
	env.post(t, "/v1/responses", body(), &res)
	items := res.items(t)
	checkItems := func(what string, items []outputItemOut) {
		t.Helper()
		if len(items) != 1+len(f.Calls) || items[0].Type != "message" || len(items[0].Content) != 1 || items[0].Content[0].Text != f.Content {
			t.Fatalf("%s: output %+v", what, items)
		}
		var calls []toolCallOut
		for i, it := range items[1:] {
			if it.Type != "function_call" || it.Status != "completed" || !strings.HasPrefix(it.ID, "fc_") {
				t.Errorf("%s: item %+v", what, it)
			}
			calls = append(calls, toolCallOut{Index: i, ID: it.CallID, Type: "function", Function: functionOut{Name: it.Name, Arguments: it.Arguments}})
		}
		checkToolCalls(t, calls, f.Calls)
	}
	checkItems("not streamed", items)
	if res.Status != "completed" {
		t.Errorf("status %q", res.Status)
	}

	events := streamResponses(t, env, body())
	final := events[len(events)-1]
	if final.name != "response.completed" {
		t.Fatalf("last event %s", final.raw)
	}
	var streamed []outputItemOut
	args := map[string]string{}
	for _, e := range events {
		switch e.name {
		case "response.function_call_arguments.delta":
			args[e.data.ItemID] += *e.data.Delta
		case "response.function_call_arguments.done":
			if *e.data.Arguments != args[e.data.ItemID] || e.data.Name == "" {
				t.Errorf("arguments done %s after deltas %q", e.raw, args[e.data.ItemID])
			}
		case "response.output_item.done":
			b, _ := json.Marshal(e.data.Item)
			var it outputItemOut
			json.Unmarshal(b, &it)
			if it.Type == "function_call" && it.Arguments != args[it.ID] {
				t.Errorf("item %s, deltas %q", b, args[it.ID])
			}
			streamed = append(streamed, it)
		}
	}
	checkItems("streamed", streamed)
	if len(final.data.Response.Output) != len(streamed) {
		t.Errorf("response.completed output %d items, %d done", len(final.data.Response.Output), len(streamed))
	}

	// The calls and their outputs go back as items (no tools: the model answers freely).
	input := []map[string]any{{"role": "user", "content": "Weather and time in Paris?"},
		{"type": "message", "role": "assistant", "content": []map[string]any{{"type": "output_text", "text": f.Content}}}}
	msgs := []map[string]any{{"role": "user", "content": "Weather and time in Paris?"}}
	var chatCalls []map[string]any
	for _, it := range items[1:] {
		input = append(input, map[string]any{"type": "function_call", "call_id": it.CallID, "name": it.Name, "arguments": it.Arguments})
		chatCalls = append(chatCalls, map[string]any{"id": it.CallID, "type": "function", "function": map[string]any{"name": it.Name, "arguments": it.Arguments}})
	}
	msgs = append(msgs, map[string]any{"role": "assistant", "content": f.Content, "tool_calls": chatCalls})
	for _, it := range items[1:] {
		input = append(input, map[string]any{"type": "function_call_output", "call_id": it.CallID, "output": "sunny"})
		msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": "sunny"})
	}
	var after responseOut
	env.post(t, "/v1/responses", map[string]any{"input": input, "max_output_tokens": 5, "temperature": 0}, &after)
	want, _ := chatReply(t, env, msgs, 5)
	if got := after.text(t); got != want {
		t.Errorf("reply after the tool outputs %q, chat reply %q", got, want)
	}
}

// TestResponsesBadInput checks malformed requests get a 400 (404 for an unknown previous
// response) naming the parameter, and leave the engine idle.
func TestResponsesBadInput(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for _, c := range []struct {
		body, param string
		status      int
	}{
		{`{}`, "input", 400},
		{`{"input":42}`, "input", 400},
		{`{"input":[]}`, "input", 400},
		{`{"input":[{"type":"image","image_url":"x"}]}`, "input[0].type", 400},
		{`{"input":[{"role":"tool","content":"x"}]}`, "input[0].role", 400},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content[0].type", 400},
		{`{"input":[{"role":"user","content":7}]}`, "input[0].content", 400},
		{`{"input":[{"type":"function_call","name":"f"}]}`, "input[0]", 400},
		{`{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", 400},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens", 400},
		{`{"input":"x","temperature":"hot"}`, "temperature", 400},
		{`{"input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", 400},
		{`{"input":"x","tools":[{"type":"function"}]}`, "tools[0].name", 400},
		{`{"input":"x","tool_choice":{"type":"function"}}`, "tool_choice", 400},
		{`{"input":"x","tool_choice":"sometimes"}`, "tool_choice", 400},
		{`{"input":"x","tool_choice":"required"}`, "tool_choice", 400},
		{`{"input":"x","text":{"format":{"type":"xml"}}}`, "text.format.type", 400},
		{`{"input":"x","text":{"format":{"type":"json_schema","name":"a"}}}`, "text.format.schema", 400},
		{`{"input":"x","text":{"format":{"type":"json_schema","name":"a","schema":{"type":"nonsense"}}}}`, "text.format.schema", 400},
		{`{"input":"x","background":true}`, "background", 400},
		{`{"input":"x","model":"other"}`, "model", 404},
		{`{"input":"x","previous_response_id":"resp_nope"}`, "previous_response_id", 404},
	} {
		status, body := env.do(t, http.MethodPost, "/v1/responses", []byte(c.body))
		if status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.body, status, c.status, body)
			continue
		}
		if e := apiErrorOf(t, body); e["param"] != c.param {
			t.Errorf("%s: param %v, want %q: %s", c.body, e["param"], c.param, body)
		}
	}
	// A body a web page could POST without a preflight is refused before it is read.
	req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/v1/responses", strings.NewReader(`{"input":"x"}`))
	req.Header.Set("Content-Type", "text/plain")
	res, err := env.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if e := apiErrorOf(t, body); res.StatusCode != http.StatusUnsupportedMediaType || e["code"] != "unsupported_media_type" {
		t.Errorf("text/plain body: %d %s", res.StatusCode, body)
	}
	waitIdle(t, env.eng, 5*time.Second)
}

// FuzzResponsesInput feeds arbitrary bytes to the Responses readers, as a whole request and
// as its input, tools, tool_choice and text.format values: they must never panic, what they
// accept must be valid chat, and what they refuse must name the field.
func FuzzResponsesInput(f *testing.F) {
	for _, seed := range []string{
		`"hello"`, `[{"role":"user","content":"hi"}]`, `[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}]`,
		`[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]`,
		`[{"role":"user","content":[{"type":"input_image"}]}]`, `{"type":"function","name":"f","parameters":{"type":"object"}}`,
		`[{"type":"reasoning","content":[{"type":"reasoning_text","text":"t"}]},{"role":"assistant","content":"a"}]`,
		`{"type":"json_schema","name":"a","schema":{"type":"object"}}`, `{"type":"function","name":"f"}`, `[]`, `null`, `7`, `[{}]`,
		`{"input":"hi","instructions":"be brief","max_output_tokens":5,"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"input":[{"role":"user","content":"x"}],"text":{"format":{"type":"json_schema","name":"a","schema":{}}},"previous_response_id":"resp_x"}`,
		`{"input":"x","background":true,"max_output_tokens":0}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if msgs, apiErr := inputMessages(raw); apiErr == nil {
			for i, m := range msgs {
				if _, apiErr := convertMessage(i, m); apiErr != nil {
					t.Errorf("accepted input %q gave a message chat refuses: %v", raw, apiErr.Message)
				}
			}
		} else if apiErr.Status != 400 || apiErr.Param == "" {
			t.Errorf("input error %+v", apiErr)
		}
		if tool, apiErr := chatTool(0, raw); apiErr == nil && !json.Valid(tool) {
			t.Errorf("tool %q became invalid JSON %q", raw, tool)
		}
		if choice, apiErr := chatToolChoice(raw); apiErr == nil {
			if _, _, apiErr := parseToolChoice(choice); apiErr != nil && apiErr.Param != "tool_choice" {
				t.Errorf("tool_choice error %+v", apiErr)
			}
		}
		// The whole request: decoded and turned into a chat request, or refused naming a field.
		var req responsesRequest
		if _, apiErr := decodeJSON(raw, &req); apiErr == nil {
			s := &Server{responses: newResponseStore(4, 1<<20)}
			if creq, _, apiErr := s.responsesChat(&req); apiErr != nil {
				if (apiErr.Status != 400 && apiErr.Status != 404) || apiErr.Param == "" {
					t.Errorf("request %q: error %+v", raw, apiErr)
				}
			} else if len(creq.Messages) == 0 {
				t.Errorf("request %q accepted with no messages", raw)
			}
		}
		var tf textFormat
		if json.Unmarshal(raw, &tf) == nil {
			if rf, apiErr := chatResponseFormat(&tf); apiErr == nil && rf != nil {
				if apiErr := rf.validate(); apiErr != nil {
					t.Errorf("text.format %q became an invalid response_format: %v", raw, apiErr.Message)
				}
			}
		}
	})
}

// TestResponsesInputItems checks an earlier response's output sent back as input (reasoning,
// message and function_call items, as clients resend response.output) becomes one
// assistant turn, and a function_call_output its tool message.
func TestResponsesInputItems(t *testing.T) {
	msgs, apiErr := inputMessages(json.RawMessage(`[{"role":"user","content":"Weather?"},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Think."}]},
		{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
		{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
		{"type":"function_call_output","call_id":"call_1","output":"sunny"}]`))
	if apiErr != nil {
		t.Fatal(apiErr.Message)
	}
	if len(msgs) != 3 {
		t.Fatalf("%d messages: %+v", len(msgs), msgs)
	}
	a := msgs[1]
	if a.Role != "assistant" || string(a.Content) != `"Checking."` || a.ReasoningContent != "Think." || len(a.ToolCalls) != 1 ||
		a.ToolCalls[0].ID != "call_1" || a.ToolCalls[0].Function.Name != "get_weather" || a.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("assistant turn %+v", a)
	}
	if m := msgs[2]; m.Role != "tool" || m.ToolCallID != "call_1" || string(m.Content) != `"sunny"` {
		t.Errorf("tool message %+v", m)
	}
	if _, apiErr := inputMessages(json.RawMessage(`[{"type":"reasoning","content":"x"}]`)); apiErr == nil || apiErr.Param != "input" {
		t.Errorf("a reasoning item with string content: %+v", apiErr)
	}
}
