package server

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
)

// Tool calling: a chat request's tools are rendered into the prompt by the chat template,
// and the model's reply is read by the tool-call parser of its family (Config.ToolCallParser,
// or the one its chat template shows) into message.tool_calls, or streamed as OpenAI's
// tool_calls deltas. tool_choice "auto" lets the model choose; "none" renders the tools and
// parses nothing; "required" and a named function must hold the model to a call, which
// takes a grammar (Config.ToolGrammar).

// ToolChoice is what a request's tools and tool_choice ask of the output, as
// Config.ToolGrammar is given it.
type ToolChoice struct {
	// Mode is "auto", "required" or "function" (the function named by Function).
	Mode string
	// Function is the function a "function" choice names.
	Function string
	// Tools are the request's tools, each as its raw JSON ({"type": "function",
	// "function": {"name", "description", "parameters"}}).
	Tools []json.RawMessage
	// Parallel is parallel_tool_calls (default true): more than one call may be made.
	Parallel bool
	// Parser names the tool-call syntax the output is read in (a toolcall parser name): a
	// grammar must produce calls in it.
	Parser string
}

// toolRequest is a chat request's tool calling, once validated: nil when the reply is not
// parsed for calls (no tools, or tool_choice "none").
type toolRequest struct {
	parser   string
	tools    []toolcall.Tool
	parallel bool
	// auto: tool_choice "auto", whose lazy grammar gives way to a structured output.
	auto bool
}

// toolFunction is the part of a tools entry the server reads.
type toolFunction struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string         `json:"name"`
		Parameters map[string]any `json:"parameters"`
	} `json:"function"`
}

// toolRequest validates a chat request's tools, tool_choice and parallel_tool_calls and
// returns how its reply is parsed, and the processors that hold it to its tool_choice.
func (s *Server) toolRequest(req *chatRequest) (*toolRequest, []kvasir.Processor, *APIError) {
	mode, named, apiErr := parseToolChoice(req.ToolChoice)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	if len(req.Tools) == 0 {
		if mode == "required" || mode == "function" {
			return nil, nil, badRequest("tool_choice", "tool_choice %s needs tools", describeChoice(mode))
		}
		return nil, nil, nil
	}
	tr := &toolRequest{parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls}
	known := map[string]bool{}
	for i, raw := range req.Tools {
		var tf toolFunction
		param := fmt.Sprintf("tools[%d]", i)
		if err := json.Unmarshal(raw, &tf); err != nil {
			return nil, nil, badRequest(param, "%s must be an object", param)
		}
		if tf.Type != "function" {
			return nil, nil, badRequest(param+".type", `%s.type must be "function", got %q`, param, tf.Type)
		}
		if tf.Function == nil || tf.Function.Name == "" {
			return nil, nil, badRequest(param+".function.name", "%s.function needs a name", param)
		}
		known[tf.Function.Name] = true
		tr.tools = append(tr.tools, toolcall.Tool{Name: tf.Function.Name, Parameters: tf.Function.Parameters})
	}
	if mode == "none" {
		return nil, nil, nil
	}
	if mode == "function" && !known[named] {
		return nil, nil, badRequest("tool_choice.function.name", "tool_choice names function %q, which is not among the tools", named)
	}
	tr.parser = s.toolParser
	if tr.parser == "" {
		return nil, nil, unsupportedValue("tools", "tools need a tool-call parser, and this model's chat template shows no tool-call syntax kvasir knows: start the server with --tool-call-parser (one of %v), or send tool_choice \"none\" to only render the tools", toolcall.Names())
	}
	if mode == "" {
		mode = "auto"
	}
	tr.auto = mode == "auto"
	grammar := s.cfg.ToolGrammar
	if grammar == nil {
		grammar = s.toolGrammar
	}
	procs, err := grammar(ToolChoice{Mode: mode, Function: named, Tools: req.Tools, Parallel: tr.parallel, Parser: tr.parser})
	if err != nil {
		return nil, nil, badRequest("tools", "tool_choice %s: %v", describeChoice(mode), err)
	}
	return tr, procs, nil
}

// toolGrammar is the ToolGrammar of a server whose Config sets none: "required" and a
// named function hold the reply to calls in the parser's syntax whose arguments are
// instances of the tools' schemas (toolcall.Grammar); "auto" leaves the reply free until
// it writes the mark a call begins with (toolcall.Triggers), and holds it to the same
// calls from there on (a lazy grammar). Under "auto" a family without such a mark, or
// tools whose schemas the grammar cannot enforce, leave the reply free, as before.
func (s *Server) toolGrammar(c ToolChoice) ([]kvasir.Processor, error) {
	var triggers []string
	if c.Mode == "auto" {
		if triggers = toolcall.Triggers(c.Parser); triggers == nil {
			return nil, nil
		}
	}
	fns := make([]toolcall.Function, 0, len(c.Tools))
	for _, raw := range c.Tools {
		var t struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		fns = append(fns, toolcall.Function{Name: t.Function.Name, Parameters: t.Function.Parameters})
	}
	gbnf, err := toolcall.Grammar(c.Parser, fns, c.Function, c.Parallel)
	if err == nil {
		var proc kvasir.Processor
		if proc, err = s.eng.Constrain(kvasir.StructuredOutput{Grammar: gbnf, Triggers: triggers}); err == nil {
			return []kvasir.Processor{proc}, nil
		}
	}
	if c.Mode == "auto" {
		return nil, nil // a choice the model may make freely is not refused for its schemas
	}
	return nil, err
}

// describeChoice names a tool_choice mode in an error.
func describeChoice(mode string) string {
	if mode == "function" {
		return "a named function"
	}
	return mode
}

// parseToolChoice reads tool_choice: "" when absent or null, "none", "auto", "required", or
// "function" with the name for {"type": "function", "function": {"name": ...}}.
func parseToolChoice(raw json.RawMessage) (mode, name string, apiErr *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", nil
	}
	const want = `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return s, "", nil
		}
		return "", "", badRequest("tool_choice", "%s, got %q", want, s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return "", "", badRequest("tool_choice", "%s", want)
	}
	return "function", named.Function.Name, nil
}

// newParser makes the parser of one choice's reply.
func (t *toolRequest) newParser() *toolcall.Parser {
	p, _ := toolcall.New(t.parser, toolcall.Options{Tools: t.tools}) // the name was checked at startup
	return p
}

// reply is a choice's reply read by its parser.
type reply struct {
	content, reasoning string
	calls              []toolCallOut
}

// parseReply reads a whole reply.
func (t *toolRequest) parseReply(text string) reply {
	p := t.newParser()
	evs := append(p.Feed(text), p.Finish()...)
	d := t.delta(evs)
	var r reply
	if d.Content != nil {
		r.content = *d.Content
	}
	r.reasoning = d.ReasoningContent
	for _, c := range p.Calls() {
		if !t.parallel && len(r.calls) == 1 {
			break
		}
		r.calls = append(r.calls, toolCallOut{Index: len(r.calls), ID: c.ID, Type: "function",
			Function: functionOut{Name: c.Name, Arguments: c.Arguments}})
	}
	return r
}

// delta turns a parser's events into a stream chunk's delta: content and reasoning joined,
// a tool_calls entry per call begun (id, type, name and empty arguments) and per run of
// argument pieces. With parallel_tool_calls false only the first call is kept.
func (t *toolRequest) delta(evs []toolcall.Event) chatDelta {
	var d chatDelta
	var content []byte
	for _, e := range evs {
		if !t.parallel && (e.Kind == toolcall.CallStart || e.Kind == toolcall.CallArgs) && e.Index > 0 {
			continue
		}
		switch e.Kind {
		case toolcall.Content:
			content = append(content, e.Text...)
		case toolcall.Reasoning:
			d.ReasoningContent += e.Text
		case toolcall.CallStart:
			d.ToolCalls = append(d.ToolCalls, toolCallOut{Index: e.Index, ID: e.ID, Type: "function", Function: functionOut{Name: e.Name}})
		case toolcall.CallArgs:
			if n := len(d.ToolCalls); n > 0 && d.ToolCalls[n-1].Index == e.Index {
				d.ToolCalls[n-1].Function.Arguments += e.Text
			} else {
				d.ToolCalls = append(d.ToolCalls, toolCallOut{Index: e.Index, Function: functionOut{Arguments: e.Text}})
			}
		}
	}
	if len(content) > 0 {
		s := string(content)
		d.Content = &s
	}
	return d
}

// toolCallOut is a tool_calls entry of a message or a delta (a delta's pieces leave out
// what an earlier piece of the call gave).
type toolCallOut struct {
	Index    int         `json:"index"`
	ID       string      `json:"id,omitempty"`
	Type     string      `json:"type,omitempty"`
	Function functionOut `json:"function"`
}

// functionOut is the function of a tool_calls entry.
type functionOut struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// toolFinish is a choice's finish_reason: "tool_calls" when it made calls and stopped.
func toolFinish(finish string, calls bool) string {
	if calls && finish == kvasir.FinishStop {
		return "tool_calls"
	}
	return finish
}
