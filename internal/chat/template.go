package chat

import (
	"errors"
	"fmt"
	"time"

	"github.com/ardanlabs/jinja"
)

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tmpl *jinja.Template
}

// Input is what a chat template is rendered with, matching the arguments transformers'
// apply_chat_template hands to the template.
type Input struct {
	// Messages is the conversation.
	Messages []Message
	// Tools are the callable functions in OpenAI's shape ({"type": "function", "function":
	// {...}}); nil renders as `tools = none`. Values may be json.RawMessage to keep key order.
	Tools []map[string]any
	// AddGenerationPrompt appends the header that starts the assistant's reply.
	AddGenerationPrompt bool
	// BOSToken and EOSToken are the tokenizer's special token texts (bos_token, eos_token).
	BOSToken, EOSToken string
	// Extra holds further template variables, such as enable_thinking or date_string. A key
	// naming one of the variables set above is an error.
	Extra map[string]any
	// Now is the clock behind strftime_now; nil means time.Now.
	Now func() time.Time
}

// RaisedError is the error a template raises through raise_exception(message), such as a
// template refusing a role it does not support. The request, not the server, is at fault.
type RaisedError struct {
	// Message is the template's own text.
	Message string
}

// Error returns the template's message.
func (e *RaisedError) Error() string { return e.Message }

// isReserved reports whether Render sets the variable name itself, so Input.Extra may not.
func isReserved(name string) bool {
	switch name {
	case "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token",
		"raise_exception", "strftime_now", toJSONFilter:
		return true
	}
	return false
}

// New compiles a chat template. A syntax error names the line and the reason.
func New(source string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat template: compiling: internal error: %v", r)
		}
	}()
	tmpl, err := jinja.Compile(prepareSource(source))
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{tmpl: tmpl}, nil
}

// Render renders the conversation in in. An error from the template's raise_exception is
// returned as a *RaisedError (use errors.As).
func (t *Template) Render(in Input) (out string, err error) {
	data, raised, err := t.context(in)
	if err != nil {
		return "", err
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template: rendering: internal error: %v", r)
		}
	}()
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		if *raised != nil && !errors.As(err, new(*RaisedError)) {
			// The engine reported the raise without wrapping it; keep the typed error.
			return "", fmt.Errorf("chat template: %w (%v)", *raised, err)
		}
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// context builds the template variables for in. raised points at the error that
// raise_exception records, so Render can report it with its type.
func (t *Template) context(in Input) (map[string]jinja.Value, **RaisedError, error) {
	data := make(map[string]jinja.Value, 8+len(in.Extra))
	for k, v := range in.Extra {
		if isReserved(k) {
			return nil, nil, fmt.Errorf("chat template: extra variable %q is set by the renderer", k)
		}
		val, err := toValue(v, k, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("chat template: extra variable %w", err)
		}
		data[k] = val
	}

	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := messageValue(m, fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return nil, nil, fmt.Errorf("chat template: %w", err)
		}
		msgs[i] = v
	}
	data["messages"] = jinja.NewList(msgs)

	data["tools"] = jinja.None()
	if in.Tools != nil {
		tools, err := toValue(in.Tools, "tools", 0)
		if err != nil {
			return nil, nil, fmt.Errorf("chat template: %w", err)
		}
		data["tools"] = tools
	}
	data["documents"] = jinja.None()
	data[toJSONFilter] = jinja.NewCallable(toJSONFilter, pyToJSON)
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	data["bos_token"] = jinja.NewString(in.BOSToken)
	data["eos_token"] = jinja.NewString(in.EOSToken)

	now := in.Now
	if now == nil {
		now = time.Now
	}
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: want one format string, got %d arguments", len(args))
		}
		return jinja.NewString(strftime(args[0].AsString(), now())), nil
	})

	raised := new(*RaisedError)
	data["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception called"
		if len(args) > 0 {
			msg = plainText(args[0])
		}
		*raised = &RaisedError{Message: msg}
		return jinja.Undefined(), *raised
	})
	return data, raised, nil
}

// plainText renders v as template output would (strings unquoted).
func plainText(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}
