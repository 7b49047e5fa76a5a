package chat

// Message is one chat turn, shaped like an OpenAI chat message.
type Message struct {
	// Role is "system", "user", "assistant", "tool" or any role a template accepts.
	Role string
	// Content is a string, a []ContentPart, or nil (an assistant turn holding only tool calls).
	Content any
	// Name is the optional participant or tool name.
	Name string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID links a "tool" turn to the call it answers.
	ToolCallID string
	// ReasoningContent is the thinking text of an assistant turn, for templates that render it.
	ReasoningContent string
}

// ContentPart is one element of a multi-part message content.
type ContentPart struct {
	// Type is "text", "image_url" or another part type.
	Type string
	// Text is the text of a "text" part.
	Text string
	// ImageURL is the URL (or data URL) of an "image_url" part.
	ImageURL string
}

// ToolCall is one function call made by the assistant, shaped like OpenAI's tool_calls entry.
type ToolCall struct {
	// ID identifies the call; a later "tool" message refers to it.
	ID string
	// Type is "function" (the default when empty).
	Type string
	// Function names the function and carries its arguments.
	Function FunctionCall
}

// FunctionCall is the function part of a ToolCall.
type FunctionCall struct {
	// Name is the function's name.
	Name string
	// Arguments is the JSON text of the arguments, as in OpenAI's API. Templates receive it as
	// a dict when it is a JSON object (as transformers expects), otherwise as the raw string.
	Arguments string
}

// Tool describes a function the model may call, shaped like OpenAI's tools entry.
type Tool struct {
	// Type is "function" (the default when empty).
	Type string
	// Function describes the function.
	Function ToolFunction
}

// ToolFunction is the function part of a Tool.
type ToolFunction struct {
	// Name is the function's name.
	Name string
	// Description says what the function does.
	Description string
	// Parameters is the JSON Schema of the arguments.
	Parameters map[string]any
}

// Map returns the tool in the OpenAI shape templates expect:
// {"type": "function", "function": {"name", "description", "parameters"}}.
func (t Tool) Map() map[string]any {
	typ := t.Type
	if typ == "" {
		typ = "function"
	}
	fn := map[string]any{"name": t.Function.Name}
	if t.Function.Description != "" {
		fn["description"] = t.Function.Description
	}
	if t.Function.Parameters != nil {
		fn["parameters"] = t.Function.Parameters
	}
	return map[string]any{"type": typ, "function": fn}
}
