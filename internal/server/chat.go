package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
)

// handleChat answers POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	req := chatRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if req.SkeletonOfThought {
		s.handleSkeletonOfThought(ctx, w, &req)
		return
	}
	kreq, tools, apiErr := s.chatRequest(ctx, &req)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	id := newID("chatcmpl-")
	ch, apiErr := s.submit(ctx, id, []kvasir.Request{kreq}, "messages")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	n := max(kreq.Params.N, 1)
	base := chatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: s.responseModel(kreq.Adapter)}
	if req.Stream {
		base.Object = "chat.completion.chunk"
		s.streamChat(w, ch, base, &req, n, kreq.Params.Logprobs, tools)
		return
	}
	res, apiErr := collect(ch, 1, n)
	if apiErr != nil {
		s.log.Error("chat completion failed", "id", id, "err", apiErr.Message)
		writeError(w, apiErr)
		return
	}
	base.Choices = make([]chatChoice, n)
	for i := range res.choices {
		cs := &res.choices[i]
		c := chatChoice{Index: i, Message: replyMessage(cs.text.String(), tools), StopReason: cs.stop}
		if req.ReturnTokenIDs {
			c.TokenIDs = cs.tokens
		}
		c.FinishReason = strPtr(toolFinish(cs.finish, len(c.Message.ToolCalls) > 0))
		if kreq.Params.Logprobs {
			c.Logprobs = s.chatLogprobs(cs.tokens, cs.logprobs)
		}
		base.Choices[i] = c
	}
	if req.PromptLogprobs != nil {
		base.PromptLogprobs = s.promptLogprobs(res.promptLogprobs[0], *req.PromptLogprobs)
	}
	base.Usage = &res.usage
	base.Usage.PromptCompression = req.compression
	writeJSON(w, http.StatusOK, base)
}

// chatRequest validates a chat request, renders its messages (stopping when ctx ends) and
// makes the engine request, with how its replies are parsed for tool calls (nil: not).
func (s *Server) chatRequest(ctx context.Context, req *chatRequest) (kvasir.Request, *toolRequest, *APIError) {
	maxTokens, maxParam := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		maxTokens, maxParam = req.MaxCompletionTokens, "max_completion_tokens"
	}
	params, apiErr := req.params(maxTokens, maxParam, 0, s.sampling)
	if apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	adapter, apiErr := s.adapterOf(req.Model)
	if apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	if req.TopLogprobs != nil {
		if !req.Logprobs && *req.TopLogprobs > 0 {
			return kvasir.Request{}, nil, badRequest("top_logprobs", "top_logprobs needs logprobs set to true")
		}
		if *req.TopLogprobs < 0 || *req.TopLogprobs > MaxTopLogprobs {
			return kvasir.Request{}, nil, badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", MaxTopLogprobs, *req.TopLogprobs)
		}
		params.TopLogprobs = *req.TopLogprobs
	}
	params.Logprobs = req.Logprobs
	for _, apiErr := range []*APIError{req.promptLogprobsParams(&params), req.beamSearchParams(&params),
		checkContinueFinal(req.AddGenerationPrompt, req.ContinueFinal)} {
		if apiErr != nil {
			return kvasir.Request{}, nil, apiErr
		}
	}
	tools, procs, apiErr := s.toolRequest(req)
	if apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	constrained, apiErr := s.constrain(&req.constraintFields)
	if apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	if len(constrained) > 0 && len(procs) > 0 {
		if !tools.auto {
			return kvasir.Request{}, nil, badRequest("tool_choice", "tool_choice and a structured output both constrain the output: give one")
		}
		procs = nil // "auto" leaves the reply to the structured output, as before its calls were held
	}
	procs = append(procs, constrained...)
	if tools != nil && req.SkipSpecialTokens == nil {
		// Tool-call syntax is often made of special tokens ([TOOL_CALLS], <|python_tag|>):
		// the parser must see them.
		params.KeepSpecialTokens = true
	}
	if apiErr := s.cfg.checkRequest(params.Stop, 1, params); apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	n, maxLen := max(params.N, 1), s.eng.MaxModelLen()
	if params.MaxTokens > 0 {
		// Refused before rendering when max_tokens alone is too much.
		var lps logprobCount
		lps.generated(params, n, params.MaxTokens, maxLen)
		if apiErr := s.cfg.checkLogprobs(lps, logprobsParam(params)); apiErr != nil {
			return kvasir.Request{}, nil, apiErr
		}
	}
	addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	var original []chatMessage
	if req.PromptCompression != nil {
		if original, apiErr = s.compressChat(ctx, req); apiErr != nil {
			return kvasir.Request{}, nil, apiErr
		}
	}
	ids, apiErr := s.renderChat(ctx, req.Messages, req.Tools, addGen, req.ContinueFinal, req.ChatTemplateKwargs)
	if apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	if original != nil {
		before, apiErr := s.renderChat(ctx, original, req.Tools, addGen, req.ContinueFinal, req.ChatTemplateKwargs)
		if apiErr != nil {
			return kvasir.Request{}, nil, apiErr
		}
		req.compression = &compressionUsage{OriginalTokens: len(before), KeptTokens: len(ids)}
	}
	var lps logprobCount
	outTokens := params.MaxTokens
	if outTokens == 0 {
		outTokens = maxLen - len(ids)
	}
	lps.generated(params, n, outTokens, maxLen)
	if params.PromptLogprobs {
		lps.add(1, len(ids), params.PromptTopLogprobs)
	}
	if apiErr := s.cfg.checkLogprobs(lps, logprobsParam(params)); apiErr != nil {
		return kvasir.Request{}, nil, apiErr
	}
	return kvasir.Request{PromptTokens: ids, Params: params, Priority: req.Priority, CacheSalt: req.CacheSalt, Processors: procs, KVPolicy: req.KVPolicy.request(),
		Adapter: adapter}, tools, nil
}

// renderChat validates messages, renders them with the chat template and tokenizes the
// result (special tokens parsed; a BOS the template wrote itself is not doubled), stopping
// when ctx ends.
func (s *Server) renderChat(ctx context.Context, msgs []chatMessage, tools []json.RawMessage, addGen, continueFinal bool, kwargs map[string]any) ([]int32, *APIError) {
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	if apiErr := s.cfg.checkMessages(len(msgs)); apiErr != nil {
		return nil, apiErr
	}
	if s.tmpl == nil {
		return nil, badRequest("messages", "%v", s.tmplErr)
	}
	if !s.eng.HasTokenizer() {
		return nil, badRequest("messages", "the model has no tokenizer")
	}
	in := chat.Input{Messages: make([]chat.Message, len(msgs)), AddGenerationPrompt: addGen && !continueFinal, Extra: kwargs}
	textBytes := 0
	for i, m := range msgs {
		cm, apiErr := convertMessage(i, m)
		if apiErr != nil {
			return nil, apiErr
		}
		textBytes += messageBytes(cm)
		if apiErr := s.cfg.checkPromptBytes("messages", "the text of the messages", textBytes); apiErr != nil {
			return nil, apiErr
		}
		in.Messages[i] = cm
	}
	for i, raw := range tools {
		var t map[string]json.RawMessage
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must be an object", i)
		}
		tm := make(map[string]any, len(t))
		for k, v := range t {
			tm[k] = v
		}
		in.Tools = append(in.Tools, tm)
	}
	if continueFinal && in.Messages[len(in.Messages)-1].Role != "assistant" {
		return nil, badRequest("continue_final_message", "continue_final_message needs an assistant message last")
	}
	ids, err := s.eng.RenderChatContext(ctx, s.tmpl, in, continueFinal)
	if err != nil {
		var raised *chat.RaisedError
		var limit *chat.LimitError
		switch {
		case errors.As(err, &raised):
			return nil, badRequest("messages", "the chat template refused the messages: %s", raised.Message)
		case errors.As(err, &limit):
			e := badRequest("messages", "rendering the chat template on these messages exceeded its %s limit (%s, the server's %s)",
				limit.Limit, limit.Max, chatLimitFlags[limit.Limit])
			e.Code = "chat_template_limit_exceeded"
			return nil, e
		}
		return nil, badRequest("messages", "rendering the chat template: %v", err)
	}
	return ids, nil
}

// chatLimitFlags names the serve flags that set each chat template limit.
var chatLimitFlags = map[chat.Limit]string{
	chat.LimitDepth:      "--chat-template-max-depth and --chat-template-max-stack",
	chat.LimitIterations: "--chat-template-max-iterations",
	chat.LimitOutput:     "--chat-template-max-output",
	chat.LimitMemory:     "--chat-template-max-memory",
	chat.LimitDeadline:   "--chat-template-timeout",
}

// convertMessage turns message i of a request into the template's message, with content
// flattened to a string (text parts joined by newlines).
func convertMessage(i int, m chatMessage) (chat.Message, *APIError) {
	param := fmt.Sprintf("messages[%d]", i)
	if m.Role == "" {
		return chat.Message{}, badRequest(param+".role", "%s.role is required", param)
	}
	if !chatRoles[m.Role] {
		return chat.Message{}, badRequest(param+".role", "%s.role %q: expected system, user, assistant, tool, developer or function", param, m.Role)
	}
	out := chat.Message{Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID, ReasoningContent: m.ReasoningContent}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: tc.ID, Type: tc.Type,
			Function: chat.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
	}
	raw := bytes.TrimSpace(m.Content)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		if len(m.ToolCalls) == 0 {
			out.Content = ""
		}
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return chat.Message{}, badRequest(param+".content", "%s.content: %v", param, err)
		}
		out.Content = s
	case raw[0] == '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return chat.Message{}, badRequest(param+".content", "%s.content must be a string or an array of content parts", param)
		}
		texts := make([]string, 0, len(parts))
		for j, p := range parts {
			switch p.Type {
			case "text", "input_text":
				texts = append(texts, p.Text)
			case "":
				return chat.Message{}, badRequest(fmt.Sprintf("%s.content[%d].type", param, j), "%s.content[%d] needs a type", param, j)
			default:
				return chat.Message{}, badRequest(fmt.Sprintf("%s.content[%d].type", param, j),
					"%s.content[%d]: content parts of type %q are not supported: the model takes text only", param, j, p.Type)
			}
		}
		out.Content = strings.Join(texts, "\n")
	default:
		return chat.Message{}, badRequest(param+".content", "%s.content must be a string or an array of content parts", param)
	}
	return out, nil
}

// messageBytes is the text of a message the template renders: its content, reasoning and
// tool calls' arguments.
func messageBytes(m chat.Message) int {
	text, _ := m.Content.(string) // convertMessage flattens content to a string
	n := len(text) + len(m.ReasoningContent)
	for _, tc := range m.ToolCalls {
		n += len(tc.Function.Arguments)
	}
	return n
}

// replyMessage is the assistant message of a reply: its text, or with tools the content,
// reasoning and calls the parser reads in it.
func replyMessage(text string, tools *toolRequest) *chatMessageOut {
	if tools == nil {
		return &chatMessageOut{Role: "assistant", Content: &text}
	}
	r := tools.parseReply(text)
	m := &chatMessageOut{Role: "assistant", ToolCalls: r.calls, ReasoningContent: r.reasoning}
	if r.content != "" || len(r.calls) == 0 {
		m.Content = &r.content
	}
	return m
}

// streamChat streams chat.completion.chunk events: first a role delta per choice, then
// content deltas (with tools: content, reasoning and tool_calls deltas as each choice's
// parser reads them), finish_reason on each choice's last chunk, an optional usage chunk,
// and [DONE].
func (s *Server) streamChat(w http.ResponseWriter, ch <-chan item, base chatResponse, req *chatRequest, n int, logprobs bool, tools *toolRequest) {
	sse := newSSE(w, int(s.cfg.MaxStreamBuffer))
	defer sse.close()
	u := usageTracker{last: make([]kvasir.Usage, 1), compression: req.compression}
	chunk := func(c chatChoice) bool {
		out := base
		out.Choices = []chatChoice{c}
		if req.continuousUsage() {
			out.Usage = u.total()
		}
		return sse.send(out)
	}
	empty := ""
	for i := 0; i < n; i++ {
		if !chunk(chatChoice{Index: i, Delta: &chatDelta{Role: "assistant", Content: &empty}}) {
			return
		}
	}
	parsers := make([]*replyStream, n)
	if tools != nil {
		for i := range parsers {
			parsers[i] = &replyStream{tools: tools, p: tools.newParser()}
		}
	}
	for it := range ch {
		o := it.Out
		u.update(it)
		if o.Err != nil {
			s.log.Error("chat completion failed mid-stream", "id", base.ID, "err", o.Err)
			sse.fail(internalError(o.Err))
			sse.done()
			return
		}
		ids := req.ReturnTokenIDs && len(o.TokenIDs) > 0
		if o.Text == "" && o.FinishReason == "" && len(o.Logprobs) == 0 && !ids {
			continue
		}
		c := chatChoice{Index: o.Index, Delta: &chatDelta{}, FinishReason: strPtr(o.FinishReason), StopReason: stopReason(o)}
		if ids {
			c.TokenIDs = o.TokenIDs
		}
		if rs := parsers[o.Index]; rs != nil {
			*c.Delta = rs.feed(o.Text, o.FinishReason != "")
			c.FinishReason = strPtr(toolFinish(o.FinishReason, rs.calls))
		} else if o.Text != "" {
			text := o.Text
			c.Delta.Content = &text
		}
		if logprobs {
			c.Logprobs = s.chatLogprobs(o.TokenIDs, o.Logprobs)
		}
		if c.Delta.empty() && c.FinishReason == nil && c.Logprobs == nil && c.TokenIDs == nil {
			continue // the parser holds the text back
		}
		if !chunk(c) {
			return
		}
	}
	if req.includeUsage() {
		out := base
		out.Choices = []chatChoice{}
		out.Usage = u.total()
		sse.send(out)
	}
	sse.done()
}

// chatLogprobs makes the chat API's logprobs object for generated tokens.
func (s *Server) chatLogprobs(ids []int32, lps []kvasir.Logprob) *chatLogprobs {
	out := &chatLogprobs{Content: []chatTokenLogprob{}}
	for i, id := range ids {
		if i >= len(lps) {
			break
		}
		text := s.eng.TokenText(id)
		e := chatTokenLogprob{Token: text, Logprob: finiteLogprob(lps[i].Token.Logprob), Bytes: tokenBytes(text),
			TopLogprobs: []chatTopLogprob{}}
		for _, t := range lps[i].Top {
			tt := s.eng.TokenText(t.ID)
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: tt, Logprob: finiteLogprob(t.Logprob), Bytes: tokenBytes(tt)})
		}
		out.Content = append(out.Content, e)
	}
	return out
}

// replyStream is one streamed choice's tool-call parser.
type replyStream struct {
	tools *toolRequest
	p     *toolcall.Parser
	calls bool // a call has begun
}

// feed parses the next text of the reply (and its end, when last) into a delta.
func (rs *replyStream) feed(text string, last bool) chatDelta {
	evs := rs.p.Feed(text)
	if last {
		evs = append(evs, rs.p.Finish()...)
	}
	d := rs.tools.delta(evs)
	if len(d.ToolCalls) > 0 {
		rs.calls = true
	}
	return d
}
