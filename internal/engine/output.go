package engine

import (
	"time"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Finish reasons.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
)

// TokenLogprob is a token with its log probability.
type TokenLogprob = sample.TokenLogprob

// Logprob is one generated token's log probability and the most likely alternatives
// (computed from the model's raw logits, before penalties and temperature).
type Logprob struct {
	Token TokenLogprob
	// Rank is the token's 1-based rank among the vocabulary (1 + the number of tokens
	// more likely; ties share a rank).
	Rank int
	Top  []TokenLogprob
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int // over all choices
	// CachedPromptTokens is how many prompt tokens came from the prefix cache.
	CachedPromptTokens int
}

// Output is an incremental result for one choice of a request: the text and tokens
// generated since the previous Output of that choice.
type Output struct {
	RequestID string
	// Index is the choice (0..n-1).
	Index int
	// Text is the new text; text that could be the start of a stop string is held back
	// until it is known not to be.
	Text     string
	TokenIDs []int32
	// Logprobs has one entry per token of TokenIDs when the request asked for logprobs.
	Logprobs []Logprob
	// PromptLogprobs, on the first Output of choice 0 of a request that asked for them,
	// has one entry per prompt token after the first: entry i is prompt token i+1's log
	// probability given the tokens before it, with the top alternatives. PromptTokenIDs,
	// on the same Output, is the prompt as the engine tokenized it.
	PromptLogprobs []Logprob
	PromptTokenIDs []int32
	// CumulativeLogprob is the sum of the log probabilities of the choice's tokens, set on
	// the Output of a beam-search choice.
	CumulativeLogprob float64
	// FinishReason is "" while the choice runs, then FinishStop, FinishLength or
	// FinishAbort on its last Output.
	FinishReason string
	// StopReason is the stop string or stop token id that ended the choice (nil for EOS,
	// length or abort).
	StopReason any
	// Usage is the request's running total (all choices).
	Usage Usage
	// Err is set when the engine failed the request (FinishReason is FinishAbort).
	Err error
	// Embedding, on the last Output of a pooling engine's request (Config.Pooling), is its
	// prompt's pooled final hidden state, not normalized.
	Embedding []float32
}

// RequestStats are the timings and counts of a finished request, handed to
// Config.OnRequestDone for latency histograms.
type RequestStats struct {
	RequestID string
	// QueueTime is from arrival to first scheduled; TTFT from arrival to the request's
	// first token; E2E from arrival to the end of its last choice.
	QueueTime, TTFT, E2E time.Duration
	PromptTokens         int
	GenerationTokens     int
	CachedPromptTokens   int
	// PeakKVBlocks is the most KV blocks one of the request's sequences held at once
	// (within its KV policy's budget, under one that drops tokens).
	PeakKVBlocks int
	// N is the number of choices asked for and MaxTokens the request's output budget.
	N, MaxTokens int
	// FinishReasons has one entry per choice.
	FinishReasons []string
	// Choices has each choice's timings, as vLLM times each child request of an n > 1
	// request (nil for beam search, whose choices appear together at the end).
	Choices []ChoiceStats
}

// ChoiceStats are the timings of one choice of a finished request.
type ChoiceStats struct {
	GenerationTokens int
	// TTFT is from the request's arrival to the choice's first token, Decode from its
	// first token to its last, and E2E from arrival to the choice's end.
	TTFT, Decode, E2E time.Duration
	// ITL are the gaps between consecutive steps that brought the choice tokens: one per
	// step, so a step that brings several (speculative decoding) counts once, as vLLM
	// times iterations.
	ITL []time.Duration
}

// StepStats are the token counts of one engine step that brought tokens, as vLLM counts an
// iteration: PromptTokens the whole prompts of the choices that got their first token in
// it, GenerationTokens the tokens it brought.
type StepStats struct {
	PromptTokens, GenerationTokens int
}

// Stats is a snapshot of the engine's gauges and counters (counters count since start).
type Stats struct {
	Running, Waiting int
	// KVUsage is the fraction of KV blocks in use, in [0, 1].
	KVUsage               float64
	NumBlocks, UsedBlocks int
	Preemptions           int64
	PrefixQueries         int64 // prompt tokens looked up in the prefix cache
	PrefixHits            int64 // of which found
	// PromptTokens counts each choice's whole prompt (cached tokens included) when the
	// choice gets its first token, as vLLM's prompt_tokens counter does;
	// ComputedPromptTokens the prompt positions whose KV was computed (not taken from the
	// prefix cache).
	PromptTokens, ComputedPromptTokens int64
	GenerationTokens                   int64
	Steps                              int64
	// Speculative decoding: SpecDrafts counts the verifications (a sequence's drafts checked
	// in one step), DraftTokens the draft tokens verified, AcceptedDrafts those kept, and
	// AcceptedPerPos[i] the verifications that kept draft i (0-based) — vLLM's
	// spec_decode counters.
	SpecDrafts, DraftTokens, AcceptedDrafts int64
	AcceptedPerPos                          [MaxSpeculativeTokens]int64
	// ForcedTokens counts the tokens jump-forward appended without sampling (structured
	// output whose grammar forced them), replacements of a sampled token included.
	ForcedTokens int64
	// Finished counts finished choices by finish reason.
	Finished map[string]int64
	// RunningLoRAs and WaitingLoRAs name the LoRA adapters of the running and the waiting
	// sequences, each once, sorted (vLLM's lora_requests_info labels).
	RunningLoRAs, WaitingLoRAs []string
}
