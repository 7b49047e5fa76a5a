package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// The OpenAI Responses API (POST /v1/responses), as vLLM serves it. A request is turned into
// a chat request: instructions become a system message, input (a string, or a list of
// messages, function_call and function_call_output items) the conversation, tools (flat
// function tools) and tool_choice their chat forms, text.format a response_format, and
// max_output_tokens max_tokens. It then runs through the chat path (template, tool-call
// parser, structured output), and its reply is told as output items: a reasoning item, a
// message with output_text, and a function_call per tool call. A streamed response sends
// the Responses events; responses are kept (store, on by default) in a bounded in-memory
// store, so that previous_response_id can continue a conversation and GET /v1/responses/{id}
// retrieve one.

// responsesRequest is the body of POST /v1/responses.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	TopK               *int              `json:"top_k"`
	Seed               *int64            `json:"seed"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               *responseText     `json:"text"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	PreviousResponseID string            `json:"previous_response_id"`
	Background         bool              `json:"background"`
	Metadata           map[string]string `json:"metadata"`
	User               string            `json:"user"`
}

// responseText is the text field of a request and a response: the output's format.
type responseText struct {
	Format *textFormat `json:"format,omitempty"`
}

// textFormat is text.format: "text", "json_object", or "json_schema" with the schema beside
// the type (not nested as in chat's response_format).
type textFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// inputItem is one element of an input list: a message (type "message", or left out), the
// reasoning, function_call and message items of an earlier response's output, or the
// function_call_output answering a call.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	// ReasoningContent is a reasoning item's content (its "content" field, which a message
	// item holds in Content).
	ReasoningContent []reasoningText `json:"-"`
}

// UnmarshalJSON reads an item, with a reasoning item's content as ReasoningContent.
func (it *inputItem) UnmarshalJSON(b []byte) error {
	type plain inputItem
	if err := json.Unmarshal(b, (*plain)(it)); err != nil {
		return err
	}
	if it.Type == "reasoning" {
		if err := json.Unmarshal(it.Content, &it.ReasoningContent); len(it.Content) > 0 && err != nil {
			return fmt.Errorf("a reasoning item's content must be a list of reasoning_text parts")
		}
	}
	return nil
}

// responseObject is a response: the answer of POST /v1/responses and GET
// /v1/responses/{id}, and the payload of the stream's lifecycle events.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"`
	Usage              *responseUsage    `json:"usage"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Text               responseText      `json:"text"`
	Store              bool              `json:"store"`
	Truncation         string            `json:"truncation"`
	Metadata           map[string]string `json:"metadata"`
	IncompleteDetails  *incompleteDetail `json:"incomplete_details"`
	Error              *APIError         `json:"error"`
}

// incompleteDetail says why a response stopped before the model finished.
type incompleteDetail struct {
	Reason string `json:"reason"`
}

// responseUsage is the usage object of a response.
type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// messageItem is an output message.
type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

// outputText is a message's output_text content part.
type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// functionCallItem is a tool call the model made.
type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// reasoningItem is the thinking a tool-call parser separated from the reply.
type reasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
	Status  string          `json:"status"`
}

// reasoningText is a reasoning item's content part.
type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func newMessageItem() *messageItem {
	return &messageItem{Type: "message", ID: newID("msg_"), Status: "in_progress", Role: "assistant", Content: []outputText{}}
}

func newReasoningItem() *reasoningItem {
	return &reasoningItem{Type: "reasoning", ID: newID("rs_"), Summary: []any{}, Content: []reasoningText{}, Status: "in_progress"}
}

// handleResponses answers POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	creq, history, apiErr := s.responsesChat(&req)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	kreq, tools, apiErr := s.chatRequest(ctx, creq)
	if apiErr != nil {
		writeError(w, responsesParam(apiErr))
		return
	}
	resp := s.newResponse(&req)
	ch, apiErr := s.submit(ctx, resp.ID, []kvasir.Request{kreq}, "input")
	if apiErr != nil {
		writeError(w, responsesParam(apiErr))
		return
	}
	if req.Stream {
		if s.streamResponse(w, ch, resp, tools) && resp.Store {
			s.responses.put(resp, history)
		}
		return
	}
	res, apiErr := collect(ch, 1, 1)
	if apiErr != nil {
		s.log.Error("response failed", "id", resp.ID, "err", apiErr.Message)
		writeError(w, apiErr)
		return
	}
	cs := &res.choices[0]
	msg := replyMessage(cs.text.String(), tools)
	if msg.ReasoningContent != "" {
		ri := newReasoningItem()
		ri.Content, ri.Status = []reasoningText{{Type: "reasoning_text", Text: msg.ReasoningContent}}, "completed"
		resp.Output = append(resp.Output, ri)
	}
	if msg.Content != nil {
		mi := newMessageItem()
		mi.Content, mi.Status = []outputText{{Type: "output_text", Text: *msg.Content, Annotations: []any{}}}, "completed"
		resp.Output = append(resp.Output, mi)
	}
	for _, tc := range msg.ToolCalls {
		resp.Output = append(resp.Output, &functionCallItem{Type: "function_call", ID: newID("fc_"), CallID: tc.ID,
			Name: tc.Function.Name, Arguments: tc.Function.Arguments, Status: "completed"})
	}
	resp.finish(cs.finish, res.usage)
	if resp.Store {
		s.responses.put(resp, history)
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleResponse answers GET /v1/responses/{id} with a stored response.
func (s *Server) handleResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	stored := s.responses.get(id)
	if stored == nil {
		writeError(w, notFound("response_id", "response_not_found", "no stored response with id %.100q (responses are kept in memory, the most recent %d of them)", id, s.responses.capacity))
		return
	}
	writeJSON(w, http.StatusOK, stored.response)
}

// newResponse is the in-progress response of a request, echoing its settings.
func (s *Server) newResponse(req *responsesRequest) *responseObject {
	resp := &responseObject{ID: newID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Model: s.responseModel(s.adapterName(req.Model)), Output: []any{}, Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens,
		Temperature: req.Temperature, TopP: req.TopP, Tools: req.Tools, ToolChoice: req.ToolChoice,
		ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls, Store: req.Store == nil || *req.Store,
		Truncation: "disabled", Metadata: req.Metadata, Text: responseText{Format: &textFormat{Type: "text"}}}
	if resp.Tools == nil {
		resp.Tools = []json.RawMessage{}
	}
	if len(resp.ToolChoice) == 0 {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	if req.Text != nil && req.Text.Format != nil {
		resp.Text.Format = req.Text.Format
	}
	if req.PreviousResponseID != "" {
		resp.PreviousResponseID = &req.PreviousResponseID
	}
	return resp
}

// finish sets the status and usage of a response whose generation ended with finish.
func (resp *responseObject) finish(finish string, u usage) {
	resp.Status = "completed"
	if finish == kvasir.FinishLength {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incompleteDetail{Reason: "max_output_tokens"}
	}
	ru := &responseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	ru.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	resp.Usage = ru
}

// responsesChat validates a Responses request and turns it into a chat request, with the
// conversation it continues and adds (history: without the instructions, which a later
// response does not inherit).
func (s *Server) responsesChat(req *responsesRequest) (*chatRequest, []chatMessage, *APIError) {
	if req.Background {
		return nil, nil, unsupportedParam("background", "background responses are not supported: send the request and wait, or stream it")
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return nil, nil, badRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	}
	var history []chatMessage
	if req.PreviousResponseID != "" {
		prev := s.responses.get(req.PreviousResponseID)
		if prev == nil {
			return nil, nil, notFound("previous_response_id", "previous_response_not_found",
				"previous_response_id %.100q names no stored response (responses are kept in memory, the most recent %d of them, when store is not false)",
				req.PreviousResponseID, s.responses.capacity)
		}
		history = append(history, prev.conversation...)
	}
	input, apiErr := inputMessages(req.Input)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	history = append(history, input...)
	msgs := history
	if req.Instructions != nil && *req.Instructions != "" {
		content, _ := json.Marshal(*req.Instructions)
		msgs = append([]chatMessage{{Role: "system", Content: content}}, history...)
	}
	creq := &chatRequest{commonRequest: commonRequest{limits: &s.cfg.Limits, Model: req.Model, MaxTokens: req.MaxOutputTokens,
		Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Seed: req.Seed, Stream: req.Stream, User: req.User},
		Messages: msgs, ParallelToolCalls: req.ParallelToolCalls}
	for i, raw := range req.Tools {
		tool, apiErr := chatTool(i, raw)
		if apiErr != nil {
			return nil, nil, apiErr
		}
		creq.Tools = append(creq.Tools, tool)
	}
	creq.ToolChoice, apiErr = chatToolChoice(req.ToolChoice)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	if req.Text != nil && req.Text.Format != nil {
		creq.ResponseFormat, apiErr = chatResponseFormat(req.Text.Format)
		if apiErr != nil {
			return nil, nil, apiErr
		}
	}
	return creq, history, nil
}

// inputMessages reads input: a string (one user message) or a list of items.
func inputMessages(raw json.RawMessage) ([]chatMessage, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input is required: a string or a list of input items")
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, badRequest("input", "input: %v", err)
		}
		return []chatMessage{{Role: "user", Content: raw}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of input items (messages, function_call and function_call_output): %v", err)
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must hold at least one item")
	}
	var msgs []chatMessage
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			content, apiErr := inputContent(param+".content", it.Content)
			if apiErr != nil {
				return nil, apiErr
			}
			if !chatRoles[it.Role] || it.Role == "tool" || it.Role == "function" {
				return nil, badRequest(param+".role", "%s.role %q: expected user, assistant, system or developer", param, it.Role)
			}
			if n := len(msgs); it.Role == "assistant" && n > 0 && openAssistant(msgs[n-1]) {
				msgs[n-1].Content = content // the message of the turn a reasoning item began
			} else {
				msgs = append(msgs, chatMessage{Role: it.Role, Content: content})
			}
		case "reasoning":
			// An earlier response's reasoning, sent back with its output: the thinking of
			// the assistant turn it begins.
			var text strings.Builder
			for _, c := range it.ReasoningContent {
				text.WriteString(c.Text)
			}
			msgs = append(msgs, chatMessage{Role: "assistant", Content: json.RawMessage("null"), ReasoningContent: text.String()})
		case "function_call":
			if it.Name == "" || it.CallID == "" {
				return nil, badRequest(param, "%s: a function_call item needs a call_id and a name", param)
			}
			call := toolCall{ID: it.CallID, Type: "function"}
			call.Function.Name, call.Function.Arguments = it.Name, it.Arguments
			// Calls join the assistant turn they follow, as a chat message holds them.
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			} else {
				msgs = append(msgs, chatMessage{Role: "assistant", Content: json.RawMessage("null"), ToolCalls: []toolCall{call}})
			}
		case "function_call_output":
			if it.CallID == "" {
				return nil, badRequest(param+".call_id", "%s: a function_call_output item needs the call_id it answers", param)
			}
			content, apiErr := inputContent(param+".output", it.Output)
			if apiErr != nil {
				return nil, apiErr
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: content})
		default:
			return nil, unsupportedValue(param+".type", "%s.type %q: expected message, reasoning, function_call or function_call_output", param, it.Type)
		}
	}
	return msgs, nil
}

// openAssistant reports whether m is an assistant turn begun by a reasoning item alone,
// which the turn's message completes.
func openAssistant(m chatMessage) bool {
	return m.Role == "assistant" && string(m.Content) == "null" && len(m.ToolCalls) == 0
}

// inputContent reads a message's content (or a function_call_output's output): a string or
// a list of text parts (input_text, output_text), returned as a JSON string.
func inputContent(param string, raw json.RawMessage) (json.RawMessage, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, badRequest(param, "%s: %v", param, err)
		}
		return raw, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return nil, badRequest(param, "%s must be a string or a list of input_text parts", param)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			texts = append(texts, p.Text)
		default:
			return nil, unsupportedValue(fmt.Sprintf("%s[%d].type", param, j), "%s[%d]: parts of type %q are not supported: the model takes text only", param, j, p.Type)
		}
	}
	b, _ := json.Marshal(strings.Join(texts, "\n"))
	return b, nil
}

// chatTool turns tools[i], a Responses function tool ({"type": "function", "name",
// "description", "parameters"}), into its chat form, nested under "function".
func chatTool(i int, raw json.RawMessage) (json.RawMessage, *APIError) {
	param := fmt.Sprintf("tools[%d]", i)
	var t struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, badRequest(param, "%s must be a function tool object", param)
	}
	if t.Type != "function" {
		return nil, unsupportedValue(param+".type", `%s.type %q: only "function" tools are supported`, param, t.Type)
	}
	if t.Name == "" {
		return nil, badRequest(param+".name", "%s needs a name", param)
	}
	fn := map[string]any{"name": t.Name}
	if t.Description != "" {
		fn["description"] = t.Description
	}
	if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
		fn["parameters"] = t.Parameters
	}
	b, err := json.Marshal(map[string]any{"type": "function", "function": fn})
	if err != nil {
		return nil, badRequest(param+".parameters", "%s.parameters must be a JSON Schema object", param)
	}
	return b, nil
}

// chatToolChoice turns a Responses tool_choice ("none", "auto", "required", or {"type":
// "function", "name"}) into its chat form.
func chatToolChoice(raw json.RawMessage) (json.RawMessage, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return raw, nil // a string or null, read by parseToolChoice
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Name == "" {
		return nil, badRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}`)
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	return b, nil
}

// chatResponseFormat turns text.format into chat's response_format.
func chatResponseFormat(f *textFormat) (*responseFormat, *APIError) {
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &responseFormat{Type: "json_object"}, nil
	case "json_schema":
		s := bytes.TrimSpace(f.Schema)
		if len(s) == 0 || s[0] != '{' {
			return nil, badRequest("text.format.schema", "text.format of type json_schema needs a schema object")
		}
		rf := &responseFormat{Type: "json_schema"}
		rf.JSONSchema = &struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}{Name: f.Name, Schema: s, Strict: f.Strict}
		return rf, nil
	}
	return nil, badRequest("text.format.type", "text.format.type %q: expected text, json_object or json_schema", f.Type)
}

// responsesParam renames the chat fields an error of the chat path names to the Responses
// fields they came from.
func responsesParam(e *APIError) *APIError {
	for _, r := range []struct{ chat, responses string }{
		{"messages", "input"}, {"max_tokens", "max_output_tokens"},
		{"response_format.json_schema.schema", "text.format.schema"}, {"response_format", "text.format"},
	} {
		if e.Param == r.chat || strings.HasPrefix(e.Param, r.chat+".") || strings.HasPrefix(e.Param, r.chat+"[") {
			out := *e
			out.Param = r.responses + strings.TrimPrefix(e.Param, r.chat)
			return &out
		}
	}
	return e
}

// conversationOf is the chat form of a finished response's output: the assistant message
// it adds to the conversation (content and tool calls).
func conversationOf(resp *responseObject) []chatMessage {
	m := chatMessage{Role: "assistant", Content: json.RawMessage("null")}
	for _, it := range resp.Output {
		switch it := it.(type) {
		case *messageItem:
			var text strings.Builder
			for _, c := range it.Content {
				text.WriteString(c.Text)
			}
			m.Content, _ = json.Marshal(text.String())
		case *reasoningItem:
			for _, c := range it.Content {
				m.ReasoningContent += c.Text
			}
		case *functionCallItem:
			call := toolCall{ID: it.CallID, Type: "function"}
			call.Function.Name, call.Function.Arguments = it.Name, it.Arguments
			m.ToolCalls = append(m.ToolCalls, call)
		}
	}
	return []chatMessage{m}
}
