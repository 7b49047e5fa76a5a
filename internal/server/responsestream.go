package server

import (
	"net/http"
	"strings"

	"github.com/kvasir-llm/kvasir"
)

// A streamed response is told as the Responses API's events, each an SSE event named by its
// type and numbered by sequence_number: response.created and response.in_progress, then per
// output item output_item.added, its content (content_part.added, output_text.delta ...,
// output_text.done, content_part.done for a message; reasoning_text.* for reasoning;
// function_call_arguments.delta ... and .done for a tool call) and output_item.done, and
// last response.completed with the whole response (its status "incomplete" when
// max_output_tokens cut it short, as vLLM sends it). The stream has no [DONE].

// responseEvent is one event of a streamed response; each type sets its own fields.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Item           any             `json:"item,omitempty"`
	Part           any             `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Name           string          `json:"name,omitempty"`
	// Code, Message and Param are an error event's.
	Code    *string `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}

// responseStream writes the events of one streamed response. At most one output item is
// open at a time; the items closed so far are resp.Output, so the open one's output_index
// is len(resp.Output).
type responseStream struct {
	sse  *sseWriter
	seq  int
	resp *responseObject

	msg       *messageItem
	reasoning *reasoningItem
	call      *functionCallItem
	text      strings.Builder // the open item's text or arguments so far
}

// streamResponse streams a response's generation; it reports whether the response
// finished (and may be stored).
func (s *Server) streamResponse(w http.ResponseWriter, ch <-chan item, resp *responseObject, tools *toolRequest) bool {
	rs := &responseStream{sse: newSSE(w, int(s.cfg.MaxStreamBuffer)), resp: resp}
	defer rs.sse.close()
	if !rs.lifecycle("response.created") || !rs.lifecycle("response.in_progress") {
		return false
	}
	var parser *replyStream
	if tools != nil {
		parser = &replyStream{tools: tools, p: tools.newParser()}
	}
	u := usageTracker{last: make([]kvasir.Usage, 1)}
	finish := ""
	for it := range ch {
		o := it.Out
		u.update(it)
		if o.Err != nil {
			s.log.Error("response failed mid-stream", "id", resp.ID, "err", o.Err)
			rs.fail(internalError(o.Err))
			return false
		}
		if o.FinishReason != "" {
			finish = o.FinishReason
		}
		ok := true
		if parser != nil {
			ok = rs.delta(parser.feed(o.Text, o.FinishReason != ""))
		} else if o.Text != "" {
			ok = rs.outputText(o.Text)
		}
		if !ok {
			return false
		}
	}
	if finish == "" {
		return false // the client went away
	}
	if len(resp.Output) == 0 && rs.msg == nil && rs.reasoning == nil && rs.call == nil && !rs.openMessage() {
		return false // an empty reply is an empty message, as when not streamed
	}
	if !rs.closeOpen() {
		return false
	}
	resp.finish(finish, *u.total())
	return rs.lifecycle("response.completed")
}

// send numbers and queues one event.
func (rs *responseStream) send(ev responseEvent) bool {
	ev.SequenceNumber = rs.seq
	rs.seq++
	return rs.sse.sendEvent(ev.Type, ev)
}

// lifecycle sends an event carrying the response as it stands.
func (rs *responseStream) lifecycle(typ string) bool {
	return rs.send(responseEvent{Type: typ, Response: rs.resp})
}

// fail sends an error event and response.failed.
func (rs *responseStream) fail(e *APIError) {
	code, param := strPtr(e.Code), strPtr(e.Param)
	if code == nil {
		code = strPtr(e.Type)
	}
	rs.send(responseEvent{Type: "error", Code: code, Message: e.Message, Param: param})
	rs.resp.Status, rs.resp.Error = "failed", e
	rs.lifecycle("response.failed")
}

// at returns the open item's output_index, and a content_index of 0.
func (rs *responseStream) at() (*int, *int) {
	i, zero := len(rs.resp.Output), 0
	return &i, &zero
}

// delta sends what a tool-call parser read in the next piece of the reply.
func (rs *responseStream) delta(d chatDelta) bool {
	if d.ReasoningContent != "" && !rs.reasoningText(d.ReasoningContent) {
		return false
	}
	if d.Content != nil && *d.Content != "" && !rs.outputText(*d.Content) {
		return false
	}
	for _, tc := range d.ToolCalls {
		if tc.ID != "" && !rs.openCall(tc) {
			return false
		}
		if tc.Function.Arguments != "" && !rs.callArguments(tc.Function.Arguments) {
			return false
		}
	}
	return true
}

// closeOpen closes the open item, if any.
func (rs *responseStream) closeOpen() bool {
	switch {
	case rs.msg != nil:
		return rs.closeMessage()
	case rs.reasoning != nil:
		return rs.closeReasoning()
	case rs.call != nil:
		return rs.closeCall()
	}
	return true
}

// openMessage opens a message item with an empty output_text part, unless one is open.
func (rs *responseStream) openMessage() bool {
	if rs.msg != nil {
		return true
	}
	if !rs.closeOpen() {
		return false
	}
	rs.msg = newMessageItem()
	out, ci := rs.at()
	return rs.send(responseEvent{Type: "response.output_item.added", OutputIndex: out, Item: rs.msg}) &&
		rs.send(responseEvent{Type: "response.content_part.added", OutputIndex: out, ItemID: rs.msg.ID, ContentIndex: ci,
			Part: outputText{Type: "output_text", Annotations: []any{}}})
}

// outputText sends a piece of the message's text.
func (rs *responseStream) outputText(text string) bool {
	if !rs.openMessage() {
		return false
	}
	rs.text.WriteString(text)
	out, ci := rs.at()
	return rs.send(responseEvent{Type: "response.output_text.delta", OutputIndex: out, ItemID: rs.msg.ID, ContentIndex: ci, Delta: &text})
}

func (rs *responseStream) closeMessage() bool {
	text := rs.text.String()
	rs.text.Reset()
	part := outputText{Type: "output_text", Text: text, Annotations: []any{}}
	m := rs.msg
	rs.msg = nil
	m.Content, m.Status = []outputText{part}, "completed"
	out, ci := rs.at()
	ok := rs.send(responseEvent{Type: "response.output_text.done", OutputIndex: out, ItemID: m.ID, ContentIndex: ci, Text: &text}) &&
		rs.send(responseEvent{Type: "response.content_part.done", OutputIndex: out, ItemID: m.ID, ContentIndex: ci, Part: part}) &&
		rs.send(responseEvent{Type: "response.output_item.done", OutputIndex: out, Item: m})
	rs.resp.Output = append(rs.resp.Output, m)
	return ok
}

// reasoningText sends a piece of the reasoning, opening a reasoning item first.
func (rs *responseStream) reasoningText(text string) bool {
	if rs.reasoning == nil {
		if !rs.closeOpen() {
			return false
		}
		rs.reasoning = newReasoningItem()
		out, ci := rs.at()
		if !rs.send(responseEvent{Type: "response.output_item.added", OutputIndex: out, Item: rs.reasoning}) ||
			!rs.send(responseEvent{Type: "response.content_part.added", OutputIndex: out, ItemID: rs.reasoning.ID, ContentIndex: ci,
				Part: reasoningText{Type: "reasoning_text"}}) {
			return false
		}
	}
	rs.text.WriteString(text)
	out, ci := rs.at()
	return rs.send(responseEvent{Type: "response.reasoning_text.delta", OutputIndex: out, ItemID: rs.reasoning.ID, ContentIndex: ci, Delta: &text})
}

func (rs *responseStream) closeReasoning() bool {
	text := rs.text.String()
	rs.text.Reset()
	r := rs.reasoning
	rs.reasoning = nil
	part := reasoningText{Type: "reasoning_text", Text: text}
	r.Content, r.Status = []reasoningText{part}, "completed"
	out, ci := rs.at()
	ok := rs.send(responseEvent{Type: "response.reasoning_text.done", OutputIndex: out, ItemID: r.ID, ContentIndex: ci, Text: &text}) &&
		rs.send(responseEvent{Type: "response.content_part.done", OutputIndex: out, ItemID: r.ID, ContentIndex: ci, Part: part}) &&
		rs.send(responseEvent{Type: "response.output_item.done", OutputIndex: out, Item: r})
	rs.resp.Output = append(rs.resp.Output, r)
	return ok
}

// openCall opens a function_call item for a call the parser began.
func (rs *responseStream) openCall(tc toolCallOut) bool {
	if !rs.closeOpen() {
		return false
	}
	rs.call = &functionCallItem{Type: "function_call", ID: newID("fc_"), CallID: tc.ID, Name: tc.Function.Name, Status: "in_progress"}
	out, _ := rs.at()
	return rs.send(responseEvent{Type: "response.output_item.added", OutputIndex: out, Item: rs.call})
}

// callArguments sends a piece of the open call's arguments.
func (rs *responseStream) callArguments(args string) bool {
	if rs.call == nil {
		return true // a piece of a call the parser dropped (parallel_tool_calls false)
	}
	rs.text.WriteString(args)
	out, _ := rs.at()
	return rs.send(responseEvent{Type: "response.function_call_arguments.delta", OutputIndex: out, ItemID: rs.call.ID, Delta: &args})
}

func (rs *responseStream) closeCall() bool {
	args := rs.text.String()
	rs.text.Reset()
	c := rs.call
	rs.call = nil
	c.Arguments, c.Status = args, "completed"
	out, _ := rs.at()
	ok := rs.send(responseEvent{Type: "response.function_call_arguments.done", OutputIndex: out, ItemID: c.ID, Arguments: &args, Name: c.Name}) &&
		rs.send(responseEvent{Type: "response.output_item.done", OutputIndex: out, Item: c})
	rs.resp.Output = append(rs.resp.Output, c)
	return ok
}
