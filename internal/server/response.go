package server

import (
	"math"

	"github.com/kvasir-llm/kvasir"
)

// usage is the usage object of a response or stream chunk.
type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails promptDetails `json:"prompt_tokens_details"`
	// PromptCompression, with a request's prompt_compression, counts the prompt's tokens
	// before and after it.
	PromptCompression *compressionUsage `json:"prompt_compression,omitempty"`
}

// promptDetails tells how many prompt tokens came from the prefix cache.
type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// add accumulates one engine request's usage.
func (u *usage) add(k kvasir.Usage) {
	u.PromptTokens += k.PromptTokens
	u.CompletionTokens += k.CompletionTokens
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens += k.CachedPromptTokens
}

// completionChoice is one choice of a text_completion (or one of its stream chunks).
type completionChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	Logprobs     *legacyLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   any             `json:"stop_reason"`
	// TokenIDs are the choice's (or the chunk's) generated token ids, with return_token_ids.
	TokenIDs []int32 `json:"token_ids,omitempty"`
	// PromptLogprobs is vLLM's prompt_logprobs of the choice's prompt, when asked for.
	PromptLogprobs promptLogprobs `json:"prompt_logprobs,omitempty"`
}

// completionResponse is a text_completion object or chunk.
type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

// legacyLogprobs is the logprobs object of the completions API.
type legacyLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// chatMessageOut is the assistant message of a chat completion. Content is null when the
// reply is only tool calls.
type chatMessageOut struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"`
	ToolCalls []toolCallOut `json:"tool_calls,omitempty"`
	// ReasoningContent is the thinking a tool-call parser separated (gpt-oss' analysis).
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// text is the message's content, "" when null.
func (m *chatMessageOut) text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// chatDelta is the delta of a chat stream chunk.
type chatDelta struct {
	Role             string        `json:"role,omitempty"`
	Content          *string       `json:"content,omitempty"`
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
}

// empty reports whether the delta says nothing.
func (d *chatDelta) empty() bool {
	return d.Role == "" && d.Content == nil && d.ReasoningContent == "" && len(d.ToolCalls) == 0
}

// chatChoice is one choice of a chat completion (Message) or chunk (Delta).
type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatDelta      `json:"delta,omitempty"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   any             `json:"stop_reason"`
	// TokenIDs are the choice's (or the chunk's) generated token ids, with return_token_ids.
	TokenIDs []int32 `json:"token_ids,omitempty"`
}

// chatResponse is a chat.completion object or chat.completion.chunk.
type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
	// PromptLogprobs is vLLM's prompt_logprobs of the rendered prompt, when asked for.
	PromptLogprobs promptLogprobs `json:"prompt_logprobs,omitempty"`
}

// chatLogprobs is the logprobs object of the chat API.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

// chatTokenLogprob is one token's entry in chat logprobs.
type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is one alternative in chat logprobs.
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// finiteLogprob clamps -Inf (a token the model rules out) to -9999, which JSON can hold.
func finiteLogprob(v float32) float64 {
	f := float64(v)
	if math.IsInf(f, 0) || math.IsNaN(f) || f < -9999 {
		return -9999
	}
	return f
}

// tokenBytes lists a token text's bytes as JSON numbers.
func tokenBytes(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

// strPtr returns a pointer to s, nil for "".
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// stopReason is the stop_reason of a choice: the stop string or token id, or null.
func stopReason(o kvasir.Output) any {
	if o.FinishReason == "" {
		return nil
	}
	return o.StopReason
}
