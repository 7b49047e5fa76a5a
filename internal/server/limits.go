package server

import (
	"fmt"

	"github.com/kvasir-llm/kvasir"
)

// This file holds the per-request budgets: what one request may ask of the server, checked
// right after its JSON is decoded and before any expensive work (rendering, tokenizing,
// generating), so that no single request can stall or exhaust the server. Each limit is a
// Limits field and a kvasir serve flag, named in the 400 that refuses a request over it.

// Defaults of Limits.
const (
	// DefaultMaxStopStrings allows many more than OpenAI's 4 stop sequences (vLLM sets no
	// limit): enough for any stop list a client sends in practice.
	DefaultMaxStopStrings = 64
	// DefaultMaxStopStringBytes bounds the text a choice holds back while a stop string may
	// be starting, which every token's matching copies.
	DefaultMaxStopStringBytes = 1024
	// DefaultMaxStopBytes bounds the automaton the stop strings compile to (at most 64 bytes
	// per byte of stop strings, building included, once per request: 1 MB).
	DefaultMaxStopBytes = 16 << 10
	// DefaultMaxChoices is the default --max-num-seqs: one request may fill the running
	// batch once, not queue thousands of sequences.
	DefaultMaxChoices = 256
	// DefaultMaxResponseLogprobs bounds the logprobs of one response, tens of megabytes of
	// JSON, while a chat with top_logprobs 20 over 32 k tokens still fits.
	DefaultMaxResponseLogprobs = 1_000_000
	// PromptBytesPerToken gives the default MaxPromptBytes: this many bytes per token of the
	// context length, eight times a tokenizer's usual average (about 4 bytes per token).
	PromptBytesPerToken = 32
	// DefaultMaxChatMessages is far more messages than a context holds (each costs the
	// template's few tokens at least), at a few milliseconds of rendering.
	DefaultMaxChatMessages = 4096
)

// chatRoles are the message roles a chat request may use (vLLM's).
var chatRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "developer": true, "function": true}

// Limits are the budgets of one request. Zero values pick the defaults.
type Limits struct {
	// MaxStopStrings caps the stop strings of a request (--max-stop-strings).
	MaxStopStrings int
	// MaxStopStringBytes caps the length of each stop string (--max-stop-string-bytes).
	MaxStopStringBytes int
	// MaxStopBytes caps the stop strings' total length (--max-stop-bytes).
	MaxStopBytes int
	// MaxChoices caps the choices of a request: prompts x n (--max-choices).
	MaxChoices int
	// MaxResponseLogprobs caps the logprob entries a response may carry, counted before
	// generating: every choice's max_tokens positions and every prompt position returned
	// (prompt_logprobs, echo with logprobs), each times 1 + its alternatives
	// (--max-response-logprobs).
	MaxResponseLogprobs int
	// MaxPromptBytes caps a text prompt (each prompt of a completions request), and the
	// text of a chat's messages in all, before they are tokenized (--max-prompt-bytes; 0:
	// PromptBytesPerToken per token of the context length).
	MaxPromptBytes int
	// MaxChatMessages caps the messages of a chat request (--max-chat-messages).
	MaxChatMessages int
}

// withDefaults fills in the zero limits; maxModelLen is the engine's context length.
func (l Limits) withDefaults(maxModelLen int) Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxStopStrings, DefaultMaxStopStrings)
	def(&l.MaxStopStringBytes, DefaultMaxStopStringBytes)
	def(&l.MaxStopBytes, DefaultMaxStopBytes)
	def(&l.MaxChoices, DefaultMaxChoices)
	def(&l.MaxResponseLogprobs, DefaultMaxResponseLogprobs)
	def(&l.MaxPromptBytes, PromptBytesPerToken*maxModelLen)
	def(&l.MaxChatMessages, DefaultMaxChatMessages)
	return l
}

// tooManyStops is the 400 for more than MaxStopStrings stop strings.
func (l *Limits) tooManyStops(n int) *APIError {
	return overLimit("stop", "max-stop-strings", "%d stop strings: at most %d per request", n, l.MaxStopStrings)
}

// overLimit is the 400 for a request over one of the limits; flag names it.
func overLimit(param, flag, format string, args ...any) *APIError {
	return badRequest(param, "%s (the server's --%s)", fmt.Sprintf(format, args...), flag)
}

// checkRequest checks the budgets of the shared fields: the stop strings and the choices of
// prompts prompts with the parameters p.
func (l *Limits) checkRequest(stops []string, prompts int, p kvasir.SamplingParams) *APIError {
	if len(stops) > l.MaxStopStrings {
		return l.tooManyStops(len(stops))
	}
	total := 0
	for i, s := range stops {
		if len(s) > l.MaxStopStringBytes {
			return overLimit("stop", "max-stop-string-bytes", "stop[%d] is %d bytes long: at most %d", i, len(s), l.MaxStopStringBytes)
		}
		total += len(s)
	}
	if total > l.MaxStopBytes {
		return overLimit("stop", "max-stop-bytes", "the stop strings are %d bytes in all: at most %d", total, l.MaxStopBytes)
	}
	if choices := prompts * max(p.N, 1); choices > l.MaxChoices {
		return overLimit("n", "max-choices", "%d prompts x n %d = %d choices: at most %d per request", prompts, max(p.N, 1), choices, l.MaxChoices)
	}
	return nil
}

// checkPromptBytes refuses a text of more than MaxPromptBytes; what names it in the message.
func (l *Limits) checkPromptBytes(param, what string, n int) *APIError {
	if n > l.MaxPromptBytes {
		return overLimit(param, "max-prompt-bytes", "%s is %d bytes long: at most %d before tokenizing", what, n, l.MaxPromptBytes)
	}
	return nil
}

// checkMessages refuses more than MaxChatMessages messages.
func (l *Limits) checkMessages(n int) *APIError {
	if n > l.MaxChatMessages {
		return overLimit("messages", "max-chat-messages", "%d messages: at most %d per request", n, l.MaxChatMessages)
	}
	return nil
}

// logprobCount counts the logprob entries a response may carry, for MaxResponseLogprobs.
type logprobCount int64

// add counts lists lists of positions positions, each with the token and top
// alternatives.
func (c *logprobCount) add(lists, positions, top int) {
	*c += logprobCount(int64(lists) * int64(max(positions, 0)) * int64(1+top))
}

// generated counts the logprobs of choices choices of up to maxTokens tokens each, when p
// asks for them (maxTokens is capped by the context length, beyond which the engine
// refuses the request anyway).
func (c *logprobCount) generated(p kvasir.SamplingParams, choices, maxTokens, maxModelLen int) {
	if p.Logprobs {
		c.add(choices, min(maxTokens, maxModelLen), p.TopLogprobs)
	}
}

// check refuses a count over MaxResponseLogprobs, naming param.
func (l *Limits) checkLogprobs(c logprobCount, param string) *APIError {
	if int64(c) > int64(l.MaxResponseLogprobs) {
		return overLimit(param, "max-response-logprobs",
			"the response would carry up to %d logprobs (prompts x n x max_tokens x (1 + top logprobs), and as many per prompt token with prompt_logprobs or echo): at most %d; lower max_tokens, n or the logprobs asked for",
			int64(c), l.MaxResponseLogprobs)
	}
	return nil
}

// logprobsParam is the parameter a refusal of too many logprobs names.
func logprobsParam(p kvasir.SamplingParams) string {
	if p.Logprobs {
		return "logprobs"
	}
	return "prompt_logprobs"
}
