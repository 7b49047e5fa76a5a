package server

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/kvasir-llm/kvasir"
)

// Limits of request fields checked before the engine sees them.
const (
	// MaxN caps n (choices per prompt).
	MaxN = 128
	// MaxPrompts caps the prompts of one completions request.
	MaxPrompts = 256
	// DefaultCompletionMaxTokens is max_tokens of /v1/completions when not given (as in
	// OpenAI's legacy API and vLLM); chat completions default to the rest of the context.
	DefaultCompletionMaxTokens = 16
	// MaxTopLogprobs caps logprobs and top_logprobs (the engine's limit).
	MaxTopLogprobs = 20
)

// streamOptions are the stream_options of a request.
type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// commonRequest holds the fields completions and chat completions share, with the names
// OpenAI and vLLM clients send.
type commonRequest struct {
	constraintFields
	Model                  string             `json:"model"`
	MaxTokens              *int               `json:"max_tokens"`
	Temperature            *float64           `json:"temperature"`
	TopP                   *float64           `json:"top_p"`
	TopK                   *int               `json:"top_k"`
	MinP                   *float64           `json:"min_p"`
	PresencePenalty        *float64           `json:"presence_penalty"`
	FrequencyPenalty       *float64           `json:"frequency_penalty"`
	RepetitionPenalty      *float64           `json:"repetition_penalty"`
	LogitBias              map[string]float64 `json:"logit_bias"`
	Seed                   *int64             `json:"seed"`
	Stop                   stopList           `json:"stop"`
	StopTokenIDs           []int32            `json:"stop_token_ids"`
	N                      *int               `json:"n"`
	IgnoreEOS              bool               `json:"ignore_eos"`
	MinTokens              int                `json:"min_tokens"`
	IncludeStopStrInOutput bool               `json:"include_stop_str_in_output"`
	SkipSpecialTokens      *bool              `json:"skip_special_tokens"`
	User                   string             `json:"user"`
	Priority               int                `json:"priority"`
	CacheSalt              string             `json:"cache_salt"`
	KVPolicy               *kvPolicyField     `json:"kv_policy"`
	// PromptCompression shortens the prompt before generation (promptcompression.go).
	PromptCompression *promptCompressionField `json:"prompt_compression"`
	Stream            bool                    `json:"stream"`
	StreamOptions     *streamOptions          `json:"stream_options"`
	// ReturnTokenIDs (vLLM's return_token_ids) puts each choice's generated token ids in
	// token_ids: what kvasir router continues a stream from when its instance fails.
	ReturnTokenIDs bool `json:"return_token_ids"`
	// PromptLogprobs, UseBeamSearch and LengthPenalty are vLLM's extensions, checked by
	// promptLogprobsParams and beamSearchParams.
	PromptLogprobs *int     `json:"prompt_logprobs"`
	UseBeamSearch  bool     `json:"use_beam_search"`
	LengthPenalty  *float64 `json:"length_penalty"`

	// limits, when set (by the handler, before decoding), bound the request's lists
	// before they are decoded (precheck).
	limits *Limits
	// compression is what prompt compression made of the prompt (nil: not asked).
	compression *compressionUsage
}

// stopList is the stop field: a string, a list of strings, or null.
type stopList []string

// UnmarshalJSON accepts a string or an array of strings.
func (s *stopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = stopList{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return &fieldError{"stop", "expected a string or an array of strings"}
	}
	*s = list
	return nil
}

// params validates the shared fields and turns them into the engine's sampling parameters,
// with d for the sampling fields the request leaves out. defaultMax is max_tokens when the
// request gives none (0: the rest of the context).
func (c *commonRequest) params(maxTokens *int, maxParam string, defaultMax int, d kvasir.SamplingDefaults) (kvasir.SamplingParams, *APIError) {
	p := d.Params()
	p.MaxTokens = defaultMax
	if maxTokens != nil {
		if *maxTokens < 1 {
			return p, badRequest(maxParam, "%s must be at least 1, got %d", maxParam, *maxTokens)
		}
		p.MaxTokens = *maxTokens
	}
	if c.N != nil {
		if *c.N < 1 || *c.N > MaxN {
			return p, badRequest("n", "n must be in [1, %d], got %d", MaxN, *c.N)
		}
		p.N = *c.N
	}
	if c.MinTokens < 0 {
		return p, badRequest("min_tokens", "min_tokens must not be negative, got %d", c.MinTokens)
	}
	p.MinTokens = c.MinTokens
	f32 := func(v *float64, def float32) float32 {
		if v == nil {
			return def
		}
		return float32(*v)
	}
	p.Temperature = f32(c.Temperature, d.Temperature)
	p.TopP = f32(c.TopP, d.TopP)
	p.MinP = f32(c.MinP, d.MinP)
	p.PresencePenalty = f32(c.PresencePenalty, 0)
	p.FrequencyPenalty = f32(c.FrequencyPenalty, 0)
	p.RepetitionPenalty = f32(c.RepetitionPenalty, d.RepetitionPenalty)
	if c.TopK != nil {
		p.TopK = *c.TopK
	}
	if c.Seed != nil {
		s := uint64(*c.Seed)
		p.Seed = &s
	}
	if len(c.LogitBias) > 0 {
		p.LogitBias = make(map[int32]float32, len(c.LogitBias))
		for k, v := range c.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return p, badRequest("logit_bias", "logit_bias keys must be token ids, got %q", k)
			}
			if math.IsNaN(v) || v < -100 || v > 100 {
				return p, badRequest("logit_bias", "logit_bias of token %d must be in [-100, 100], got %v", id, v)
			}
			p.LogitBias[int32(id)] = float32(v)
		}
	}
	for i, s := range c.Stop {
		if s == "" {
			return p, badRequest("stop", "stop[%d] is empty", i)
		}
	}
	p.Stop = c.Stop
	p.StopTokenIDs = c.StopTokenIDs
	p.IgnoreEOS = c.IgnoreEOS
	p.IncludeStopStrInOutput = c.IncludeStopStrInOutput
	p.KeepSpecialTokens = c.SkipSpecialTokens != nil && !*c.SkipSpecialTokens
	if c.StreamOptions != nil && !c.Stream {
		return p, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	return p, nil
}

// includeUsage reports whether a stream ends with a usage chunk.
func (c *commonRequest) includeUsage() bool {
	return c.StreamOptions != nil && c.StreamOptions.IncludeUsage
}

// continuousUsage reports whether every stream chunk carries usage.
func (c *commonRequest) continuousUsage() bool {
	return c.StreamOptions != nil && c.StreamOptions.IncludeUsage && c.StreamOptions.ContinuousUsageStats
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	commonRequest
	Prompt   promptInput `json:"prompt"`
	Echo     bool        `json:"echo"`
	Logprobs *int        `json:"logprobs"`
	Suffix   *string     `json:"suffix"`
	BestOf   *int        `json:"best_of"`
	// restOfContext makes max_tokens, when not given, the rest of the context rather than
	// DefaultCompletionMaxTokens (set by the llama.cpp and ollama endpoints, whose
	// default is no limit).
	restOfContext bool
}

// promptInput is the prompt field: a string, a list of strings, a list of token ids or a
// list of token-id lists. Exactly one of each element's Text and Tokens is set.
type promptInput []promptItem

// promptItem is one prompt: text, or token ids.
type promptItem struct {
	Text   string
	Tokens []int32
	IsText bool
}

// UnmarshalJSON accepts the four prompt shapes of OpenAI's completions API.
func (p *promptInput) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	bad := &fieldError{"prompt", "expected a string, an array of strings, an array of token ids or an array of token-id arrays"}
	if len(b) == 0 || string(b) == "null" {
		*p = nil
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return bad
		}
		*p = promptInput{{Text: s, IsText: true}}
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return bad
	}
	if len(raw) == 0 {
		return &fieldError{"prompt", "the prompt list is empty"}
	}
	first := bytes.TrimSpace(raw[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		var list []string
		if err := json.Unmarshal(b, &list); err != nil {
			return bad
		}
		for _, s := range list {
			*p = append(*p, promptItem{Text: s, IsText: true})
		}
	case len(first) > 0 && first[0] == '[':
		var lists [][]int32
		if err := json.Unmarshal(b, &lists); err != nil {
			return &fieldError{"prompt", "token ids must be integers in range"}
		}
		for i, l := range lists {
			if len(l) == 0 {
				return &fieldError{"prompt", "prompt " + strconv.Itoa(i) + " has no tokens"}
			}
			*p = append(*p, promptItem{Tokens: l})
		}
	default:
		var ids []int32
		if err := json.Unmarshal(b, &ids); err != nil {
			return &fieldError{"prompt", "token ids must be integers in range"}
		}
		*p = promptInput{{Tokens: ids}}
	}
	return nil
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	commonRequest
	Messages            []chatMessage     `json:"messages"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Logprobs            bool              `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	ContinueFinal       bool              `json:"continue_final_message"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	// SkeletonOfThought answers by Skeleton-of-Thought (sot.go).
	SkeletonOfThought bool `json:"skeleton_of_thought"`
}

// chatMessage is one message of a chat request. Content is kept raw: a string, an array
// of content parts, or null.
type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []toolCall      `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent string          `json:"reasoning_content"`
}

// toolCall is an assistant message's tool call.
type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// contentPart is one element of an array content.
type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// responseFormat is the response_format of a request (OpenAI's, in chat; vLLM's extension
// in completions).
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// validate checks the shape of a response_format: text, json_object, or json_schema with a
// schema object.
func (f *responseFormat) validate() *APIError {
	switch f.Type {
	case "text", "json_object":
		return nil
	case "json_schema":
		if f.JSONSchema == nil {
			return badRequest("response_format.json_schema", "response_format of type json_schema needs a json_schema object")
		}
		s := bytes.TrimSpace(f.JSONSchema.Schema)
		if len(s) == 0 || s[0] != '{' {
			return badRequest("response_format.json_schema.schema", "response_format.json_schema.schema must be a JSON Schema object")
		}
		return nil
	case "":
		return badRequest("response_format.type", "response_format needs a type: text, json_object or json_schema")
	}
	return badRequest("response_format.type", "response_format.type %q: expected text, json_object or json_schema", f.Type)
}

// tokenizeRequest is the body of POST /tokenize: a prompt, or chat messages.
type tokenizeRequest struct {
	Model               string            `json:"model"`
	Prompt              *string           `json:"prompt"`
	Messages            []chatMessage     `json:"messages"`
	AddSpecialTokens    *bool             `json:"add_special_tokens"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	ContinueFinal       bool              `json:"continue_final_message"`
	ReturnTokenStrs     bool              `json:"return_token_strs"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	Tools               []json.RawMessage `json:"tools"`

	limits *Limits // as commonRequest's
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}
