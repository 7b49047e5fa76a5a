package chat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ardanlabs/jinja"
)

// Template is a compiled chat template. It is safe for concurrent use. A template made by New
// renders in this process; one made by Sandbox.Load renders in the sandbox's workers.
type Template struct {
	tmpl   *jinja.Template // nil for a sandbox's template: its workers compile it
	limits Limits
	src    string   // the source, for a sandbox's workers
	sb     *Sandbox // nil when rendering in this process
	id     uint64   // the sandbox's name for the template
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
		"raise_exception", "strftime_now", "range", toJSONFilter, loopFunc, enterFunc, leaveFunc:
		return true
	}
	return false
}

// New compiles a chat template to render in this process, under the default Limits (of
// which only the depth, iteration and output limits hold in a process). A syntax error names
// the line and the reason. Use a Sandbox for templates that may be hostile.
func New(source string) (*Template, error) {
	return compile(source, Limits{}.withDefaults())
}

// compile compiles source to render in this process under limits.
func compile(source string, limits Limits) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, &CompileError{Err: fmt.Errorf("internal error: %v", r)}
		}
	}()
	tmpl, err := jinja.Compile(prepareSource(source))
	if err != nil {
		return nil, &CompileError{Err: err}
	}
	return &Template{tmpl: tmpl, limits: limits}, nil
}

// CompileError is the error of a template that does not compile.
type CompileError struct {
	// Err is the engine's reason, with the line.
	Err error
}

// Error says why the template does not compile.
func (e *CompileError) Error() string { return "chat template: " + e.Err.Error() }

// Unwrap returns the engine's error.
func (e *CompileError) Unwrap() error { return e.Err }

// Render renders the conversation in in. An error from the template's raise_exception is
// returned as a *RaisedError, a limit exceeded as a *LimitError (use errors.As).
func (t *Template) Render(in Input) (string, error) {
	return t.RenderContext(context.Background(), in)
}

// RenderContext is Render that stops when ctx ends: a sandbox's render is killed then (a
// render in this process cannot be stopped, so ctx is only checked before it starts).
func (t *Template) RenderContext(ctx context.Context, in Input) (string, error) {
	data, err := variables(in)
	if err != nil {
		return "", err
	}
	now := time.Now
	if in.Now != nil {
		now = in.Now
	}
	if t.sb != nil {
		return t.sb.render(ctx, t, data, now())
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return t.renderValues(data, now)
}

// renderValues renders the template variables data, adding the renderer's callables.
func (t *Template) renderValues(data map[string]jinja.Value, now func() time.Time) (out string, err error) {
	st := addCallables(data, now, t.limits)
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template: rendering: internal error: %v", r)
		}
	}()
	out, err = t.tmpl.RenderValues(data)
	switch {
	case st.limit != nil:
		return "", st.limit
	case err != nil && st.raised != nil && !errors.As(err, new(*RaisedError)):
		// The engine reported the raise without wrapping it; keep the typed error.
		return "", fmt.Errorf("chat template: %w (%v)", st.raised, err)
	case err != nil:
		return "", fmt.Errorf("chat template: %w", err)
	case int64(len(out)) > t.limits.MaxOutputBytes:
		return "", t.limits.limitError(LimitOutput)
	}
	return out, nil
}

// variables builds the template variables of in, without the renderer's callables.
func variables(in Input) (map[string]jinja.Value, error) {
	data := make(map[string]jinja.Value, 8+len(in.Extra))
	for k, v := range in.Extra {
		if isReserved(k) {
			return nil, fmt.Errorf("chat template: extra variable %q is set by the renderer", k)
		}
		val, err := toValue(v, k, 0)
		if err != nil {
			return nil, fmt.Errorf("chat template: extra variable %w", err)
		}
		data[k] = val
	}

	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := messageValue(m, fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		msgs[i] = v
	}
	data["messages"] = jinja.NewList(msgs)

	data["tools"] = jinja.None()
	if in.Tools != nil {
		tools, err := toValue(in.Tools, "tools", 0)
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		data["tools"] = tools
	}
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	data["bos_token"] = jinja.NewString(in.BOSToken)
	data["eos_token"] = jinja.NewString(in.EOSToken)
	return data, nil
}

// renderState is what a render's callables record: the template's raise, a limit exceeded.
type renderState struct {
	raised     *RaisedError
	limit      *LimitError
	depth      int
	iterations int64
}

// addCallables adds the callables of one render to data: tojson, strftime_now (on the clock
// now), raise_exception and the counters of loop iterations and macro depth that
// prepareSource inserts. The returned state records what they saw.
func addCallables(data map[string]jinja.Value, now func() time.Time, limits Limits) *renderState {
	st := &renderState{}
	empty := jinja.NewString("")
	data[toJSONFilter] = jinja.NewCallable(toJSONFilter, pyToJSON)
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: want one format string, got %d arguments", len(args))
		}
		return jinja.NewString(strftime(args[0].AsString(), now())), nil
	})
	data["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception called"
		if len(args) > 0 {
			msg = plainText(args[0])
		}
		st.raised = &RaisedError{Message: msg}
		return jinja.Undefined(), st.raised
	})
	// range is Python's, but a range longer than the loop limit is refused before it is
	// built: the library's range makes the whole list first, so range(10**8) would take a
	// worker's memory before a single iteration counts.
	data["range"] = jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		start, stop, step, err := rangeArgs(args)
		if err != nil {
			return jinja.Undefined(), err
		}
		n := rangeLen(start, stop, step)
		if n > uint64(max(limits.MaxIterations, 0)) {
			st.limit = limits.limitError(LimitIterations)
			return jinja.Undefined(), st.limit
		}
		items := make([]jinja.Value, 0, min(n, 1024)) // grown as it fills, as the library's
		for i := range int64(n) {
			items = append(items, jinja.NewInt(start+i*step))
		}
		return jinja.NewList(items), nil
	})
	data[loopFunc] = jinja.NewCallable(loopFunc, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if st.iterations++; st.iterations > limits.MaxIterations {
			st.limit = limits.limitError(LimitIterations)
			return jinja.Undefined(), st.limit
		}
		return empty, nil
	})
	data[enterFunc] = jinja.NewCallable(enterFunc, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if st.depth++; st.depth > limits.MaxDepth {
			st.limit = limits.limitError(LimitDepth)
			return jinja.Undefined(), st.limit
		}
		return empty, nil
	})
	data[leaveFunc] = jinja.NewCallable(leaveFunc, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		st.depth--
		return empty, nil
	})
	return st
}

// rangeArgs reads range's arguments as Python does: (stop), (start, stop) or (start, stop,
// step), integers, step not zero.
func rangeArgs(args []jinja.Value) (start, stop, step int64, err error) {
	for _, a := range args {
		if !a.IsInt() {
			return 0, 0, 0, fmt.Errorf("range: want integer arguments, got %s", a.String())
		}
	}
	switch len(args) {
	case 1:
		return 0, args[0].AsInt(), 1, nil
	case 2:
		return args[0].AsInt(), args[1].AsInt(), 1, nil
	case 3:
		if args[2].AsInt() == 0 {
			return 0, 0, 0, fmt.Errorf("range: step must not be zero")
		}
		return args[0].AsInt(), args[1].AsInt(), args[2].AsInt(), nil
	}
	return 0, 0, 0, fmt.Errorf("range: want 1 to 3 arguments, got %d", len(args))
}

// rangeLen returns how many values range(start, stop, step) holds (step not zero), in
// unsigned arithmetic so that no span overflows.
func rangeLen(start, stop, step int64) uint64 {
	if step > 0 && start < stop {
		return (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	}
	if step < 0 && start > stop {
		return (uint64(start)-uint64(stop)-1)/(-uint64(step)) + 1
	}
	return 0
}

// plainText renders v as template output would (strings unquoted).
func plainText(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}
