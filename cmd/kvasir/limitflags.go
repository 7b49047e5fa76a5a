package main

import (
	"flag"

	"github.com/kvasir-llm/kvasir/internal/server"
)

// addLimitFlags adds serve's per-request budgets (server.Limits) to fs.
func addLimitFlags(fs *flag.FlagSet) *server.Limits {
	l := &server.Limits{}
	fs.IntVar(&l.MaxStopStrings, "max-stop-strings", server.DefaultMaxStopStrings, "most stop strings per request (OpenAI allows 4)")
	intBytesVar(fs, &l.MaxStopStringBytes, "max-stop-string-bytes", server.DefaultMaxStopStringBytes, "longest stop string")
	intBytesVar(fs, &l.MaxStopBytes, "max-stop-bytes", server.DefaultMaxStopBytes, "most bytes of stop strings per request, in all")
	fs.IntVar(&l.MaxChoices, "max-choices", server.DefaultMaxChoices, "most choices per request: prompts x n")
	fs.IntVar(&l.MaxResponseLogprobs, "max-response-logprobs", server.DefaultMaxResponseLogprobs, "most logprobs one response may carry, counted before generating: choices x max_tokens x (1 + top logprobs), and as many per prompt token with prompt_logprobs or echo")
	intBytesVar(fs, &l.MaxPromptBytes, "max-prompt-bytes", 0, "longest text prompt (each of a completions request; a chat's messages in all), before tokenizing (0: 32 bytes per token of the context length)")
	fs.IntVar(&l.MaxChatMessages, "max-chat-messages", server.DefaultMaxChatMessages, "most messages per chat request")
	return l
}
