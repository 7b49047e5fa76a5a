package engine

import (
	"errors"
	"fmt"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"math"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// SamplingParams are one request's generation settings, as the OpenAI and vLLM APIs name
// them. The zero value is greedy decoding up to the context length.
type SamplingParams struct {
	// N is the number of sequences (choices) generated from the prompt; 0 means 1.
	N int
	// MaxTokens caps each choice's output tokens; 0 means up to the context length.
	MaxTokens int
	// MinTokens holds back end-of-generation, stop tokens and stop strings until a choice has
	// this many output tokens.
	MinTokens int
	// Temperature scales the logits; 0 is greedy decoding.
	Temperature float32
	// TopK keeps the K most likely tokens (0 or -1: all).
	TopK int
	// TopP keeps the most likely tokens whose probability sums to P (0 or 1: all).
	TopP float32
	// MinP drops tokens less likely than MinP times the most likely one.
	MinP float32
	// RepetitionPenalty (> 1 discourages repeats; 0 or 1: off), PresencePenalty and
	// FrequencyPenalty (-2..2) as vLLM applies them.
	RepetitionPenalty, PresencePenalty, FrequencyPenalty float32
	// LogitBias adds a bias to the logits of chosen token ids (-100..100).
	LogitBias map[int32]float32
	// Seed makes sampling reproducible; choice i of a request draws from Seed+i. Nil picks
	// a random seed.
	Seed *uint64
	// Logprobs asks for the log probability of each sampled token; TopLogprobs for that
	// many alternatives per position as well.
	Logprobs    bool
	TopLogprobs int
	// Stop strings end a choice when they appear in its text (matched across token
	// boundaries); the stop string is left out of the text unless IncludeStopStrInOutput.
	Stop                   []string
	IncludeStopStrInOutput bool
	// StopTokenIDs end a choice when sampled (the token is kept in the token ids).
	StopTokenIDs []int32
	// IgnoreEOS keeps generating past end-of-generation tokens.
	IgnoreEOS bool
	// KeepSpecialTokens puts the text of special tokens into the output (skip_special_tokens
	// false).
	KeepSpecialTokens bool
	// PromptLogprobs asks for the log probability of every prompt token after the first
	// (vLLM's prompt_logprobs), with PromptTopLogprobs alternatives per position: on the
	// first Output of choice 0 (Output.PromptLogprobs). Such a request computes its whole
	// prompt: it takes no prefix-cache hits (as in vLLM), though it still offers its
	// blocks to later requests.
	PromptLogprobs    bool
	PromptTopLogprobs int
	// UseBeamSearch generates by beam search of width N (at least 1) instead of sampling:
	// every step keeps the N best continuations of the beams by cumulative log
	// probability, and the request ends with its N best sequences as choices 0..N-1 in
	// score order, each a single Output. Sampling settings do not apply (beam scores are
	// the model's raw log probabilities, as in vLLM); stop strings, penalties, logit bias,
	// min_p and top-k/top-p are refused.
	UseBeamSearch bool
	// LengthPenalty divides a finished beam's cumulative log probability by its length
	// (prompt included) to this power when beams are ranked: cum / len^LengthPenalty
	// (vLLM's; 0 ranks by the cumulative log probability alone, 1 by its mean).
	LengthPenalty float32
}

// Limits of the sampling parameters.
const (
	MaxTopLogprobs = 20
	MaxLogitBias   = 100
)

// ParamError is an invalid request parameter; Param names it as the API does.
type ParamError struct {
	Param   string
	Message string
}

func (e *ParamError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Param, e.Message) }

// Errors a submission may be refused with (wrapped with the numbers; test with errors.Is).
var (
	// ErrTooLong: the prompt plus max_tokens exceeds the context length or the KV pool.
	ErrTooLong = errors.New("request does not fit")
	// ErrQueueFull: the waiting queue is at Config.MaxWaiting.
	ErrQueueFull = errors.New("waiting queue full")
	// ErrClosed: the engine is closing or closed.
	ErrClosed = errors.New("engine closed")
)

func paramErr(param, format string, args ...any) error {
	return &ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// validate checks the parameters against the vocabulary size and the engine's limits.
func (p *SamplingParams) validate(vocab, maxSeqs int) error {
	bad := func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }
	switch {
	case p.N < 0:
		return paramErr("n", "%d: must be at least 1", p.N)
	case p.N > maxSeqs:
		return paramErr("n", "%d: more than the engine's %d concurrent sequences", p.N, maxSeqs)
	case p.MaxTokens < 0:
		return paramErr("max_tokens", "%d: must be at least 1", p.MaxTokens)
	case p.MinTokens < 0:
		return paramErr("min_tokens", "%d: must not be negative", p.MinTokens)
	case p.MaxTokens > 0 && p.MinTokens > p.MaxTokens:
		return paramErr("min_tokens", "%d: more than max_tokens %d", p.MinTokens, p.MaxTokens)
	case bad(p.Temperature) || p.Temperature < 0:
		return paramErr("temperature", "%v: must be at least 0", p.Temperature)
	case p.TopK < -1:
		return paramErr("top_k", "%d: must be -1, 0 or positive", p.TopK)
	case bad(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return paramErr("top_p", "%v: must be in (0, 1]", p.TopP)
	case bad(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return paramErr("min_p", "%v: must be in [0, 1]", p.MinP)
	case bad(p.RepetitionPenalty) || p.RepetitionPenalty < 0:
		return paramErr("repetition_penalty", "%v: must be positive", p.RepetitionPenalty)
	case bad(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return paramErr("presence_penalty", "%v: must be in [-2, 2]", p.PresencePenalty)
	case bad(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return paramErr("frequency_penalty", "%v: must be in [-2, 2]", p.FrequencyPenalty)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return paramErr("top_logprobs", "%d: must be in [0, %d]", p.TopLogprobs, MaxTopLogprobs)
	case p.PromptTopLogprobs < 0 || p.PromptTopLogprobs > MaxTopLogprobs:
		return paramErr("prompt_logprobs", "%d: must be in [0, %d]", p.PromptTopLogprobs, MaxTopLogprobs)
	case bad(p.LengthPenalty):
		return paramErr("length_penalty", "%v: must be a number", p.LengthPenalty)
	}
	if p.UseBeamSearch {
		if err := p.validateBeam(); err != nil {
			return err
		}
	}
	for id, b := range p.LogitBias {
		if id < 0 || int(id) >= vocab {
			return paramErr("logit_bias", "token %d outside the vocabulary of %d", id, vocab)
		}
		if bad(b) || b < -MaxLogitBias || b > MaxLogitBias {
			return paramErr("logit_bias", "token %d: bias %v outside [-100, 100]", id, b)
		}
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 || int(id) >= vocab {
			return paramErr("stop_token_ids", "token %d outside the vocabulary of %d", id, vocab)
		}
	}
	return nil
}

// validateBeam refuses the settings beam search cannot honour: it ranks continuations by
// the model's log probabilities, so nothing that reshapes or cuts them applies.
func (p *SamplingParams) validateBeam() error {
	refuse := func(param string) error {
		return paramErr(param, "not supported with beam search (use_beam_search)")
	}
	switch {
	case len(p.Stop) > 0:
		return refuse("stop")
	case len(p.LogitBias) > 0:
		return refuse("logit_bias")
	case p.MinP > 0:
		return refuse("min_p")
	case p.TopK > 0:
		return refuse("top_k")
	case p.TopP > 0 && p.TopP < 1:
		return refuse("top_p")
	case p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1:
		return refuse("repetition_penalty")
	case p.PresencePenalty != 0:
		return refuse("presence_penalty")
	case p.FrequencyPenalty != 0:
		return refuse("frequency_penalty")
	case p.MinTokens > 0:
		return refuse("min_tokens")
	case p.PromptLogprobs:
		return refuse("prompt_logprobs")
	}
	return nil
}

// Request is one generation request.
type Request struct {
	// ID names the request in outputs and metrics; the engine makes one when empty. It
	// must be unique among the requests in flight.
	ID string
	// PromptTokens is the prompt; when nil, Prompt is tokenized (with BOS as the
	// vocabulary asks).
	PromptTokens []int32
	Prompt       string
	Params       SamplingParams
	// Priority orders waiting requests and chooses preemption victims: lower values are
	// served first (vLLM's convention); equal priorities are first come, first served.
	Priority int
	// CacheSalt separates prefix-cache entries between tenants.
	CacheSalt string
	// Processors are stateful logits processors of choice 0 (a grammar, for example):
	// each is told the tokens the choice accepts and takes them back on rollback; a
	// sample.Masker restricts the next token by a vocabulary mask, applied on the host
	// and by a device sampler alike. Choices 1..N-1 get clones. The engine owns them
	// once the request is submitted.
	Processors []sample.Stateful
	// KVPolicy, when set, is the request's KV policy: its unset parts take the engine's
	// (Config.KVPolicy; see kvcache.PolicySpec.Over).
	KVPolicy *kvcache.PolicySpec
	// ImportKV, when set, is the KV of the prompt's leading full blocks computed by another
	// instance (prefill/decode disaggregation): the blocks whose hashes match the prompt's
	// own are taken instead of computed.
	ImportKV *KVImport
	// OnLayerKV, when set, receives the keys and values of the prompt's full blocks layer
	// by layer as the steps compute them (the prefill side of a KV transfer; see
	// LayerKVFunc), on a model whose steps call per-layer hooks (Engine.StreamsLayers).
	// Blocks taken from the prefix cache or imported are not computed, so never
	// reported; a block computed again (after a preemption) is reported again.
	OnLayerKV LayerKVFunc
	// Adapter, when set, is the LoRA adapter the request runs with (the model must have
	// LoRA enabled); nil runs the base model. Its keys and values are never shared with
	// the base's or another adapter's through the prefix cache.
	Adapter *lora.Adapter
}
