// Package kvasir is the Go API of the kvasir inference engine: open a model, submit
// generation requests with a context, and receive their outputs as a stream. Many requests
// run at once on one model and one paged KV cache, with continuous batching, chunked
// prefill, prefix caching and preemption.
//
// It is also the one place that assembles the program: Load makes the backends Options
// name (CPU ranks, CUDA ranks), binds the model and its tokenizer on them, and applies the
// environment's overrides; Open and OpenModel start an engine on what Load made. The
// sampling defaults (SamplingDefaults) and the chat rendering (Engine.RenderChat) that the
// commands and the server share live here too.
//
//	e, err := kvasir.Open("model.gguf", kvasir.Options{})
//	...
//	defer e.Close()
//	out, err := e.Generate(ctx, kvasir.Request{Prompt: "Once upon a time",
//		Params: kvasir.SamplingParams{MaxTokens: 64, Temperature: 0.8}})
//	for o := range out {
//		fmt.Print(o.Text)
//	}
package kvasir

import (
	"context"
	"fmt"
	"time"

	"github.com/kvasir-llm/kvasir/internal/engine"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/kvpool"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/spec"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

type (
	// Request is one generation request: a prompt (text or token ids), sampling
	// parameters, a priority and a cache salt.
	Request = engine.Request
	// SamplingParams are a request's generation settings (OpenAI/vLLM names).
	SamplingParams = engine.SamplingParams
	// Output is an incremental result for one choice of a request.
	Output = engine.Output
	// Usage counts a request's prompt, completion and cached prompt tokens.
	Usage = engine.Usage
	// Logprob is a generated token's log probability with the top alternatives.
	Logprob = engine.Logprob
	// TokenLogprob is a token id with its log probability.
	TokenLogprob = engine.TokenLogprob
	// RequestStats are a finished request's latencies and counts (for metrics).
	RequestStats = engine.RequestStats
	// ChoiceStats are one choice's timings within RequestStats.
	ChoiceStats = engine.ChoiceStats
	// StepStats are the token counts of one engine step that brought tokens (for metrics).
	StepStats = engine.StepStats
	// KVEvent is one block entering or leaving the prefix cache (Options.OnKVEvent).
	KVEvent = kvcache.Event
	// BlockHash is a KV block's chained hash: its tokens, its cache salt and everything
	// before it.
	BlockHash = kvcache.BlockHash
	// Stats is a snapshot of the engine's gauges and counters (for metrics).
	Stats = engine.Stats
	// KVImport is the KV of a prompt's leading full blocks computed by another instance
	// (Request.ImportKV; prefill/decode disaggregation).
	KVImport = engine.KVImport
	// KVPin is a prompt's cached blocks held for reading out (Engine.PinPrefix).
	KVPin = engine.KVPin
	// LayerKVFunc receives a prompt's KV layer by layer as it is computed
	// (Request.OnLayerKV; the prefill side of a KV transfer).
	LayerKVFunc = engine.LayerKVFunc
	// ParamError is an invalid request parameter, naming it.
	ParamError = engine.ParamError
	// Processor is a stateful logits processor of a request (Request.Processors): the
	// engine tells it every token the request's choice accepts and takes tokens back from
	// it when draft tokens are rejected. One that also implements Masker restricts the
	// next token.
	Processor = sample.Stateful
	// Masker is a Processor that restricts the next token by a vocabulary Mask, applied on
	// the host and by a device sampler alike.
	Masker = sample.Masker
	// Mask is a set of token ids as a bitmask (bit t%32 of word t/32); see NewMask.
	Mask = sample.Mask
	// Proposer proposes draft tokens for speculative decoding (SpeculativeConfig.Proposer,
	// a custom proposer): the model verifies them in one step and the engine keeps those
	// the request's own sampling agrees with, so the tokens generated do not change.
	Proposer = engine.Proposer
	// SpeculativeConfig configures speculative decoding (Options.Speculative): vLLM's
	// --speculative-config fields (see ParseSpeculativeConfig), or a custom Proposer.
	SpeculativeConfig = spec.Config
)

// The speculative-decoding methods (SpeculativeConfig.Method).
const (
	SpecNGram      = spec.MethodNGram
	SpecDraftModel = spec.MethodDraftModel
	SpecLayerSkip  = spec.MethodLayerSkip
)

// ParseSpeculativeConfig reads vLLM's --speculative-config JSON: "method" (ngram,
// draft_model or layer_skip; inferred from the fields when left out),
// "num_speculative_tokens" (K, 1..16), "prompt_lookup_min" and "prompt_lookup_max"
// (ngram; vLLM's default 5), "model" (draft_model: any model reference OpenRef reads),
// "draft_layers" (layer_skip) and "dynamic" (default true: choose each sequence's draft
// length per step; false drafts K always). Anything else is an error.
func ParseSpeculativeConfig(s string) (*SpeculativeConfig, error) { return spec.Parse([]byte(s)) }

// NewMask returns a mask over a vocabulary of n tokens allowing the ids given.
func NewMask(n int, ids ...int32) Mask { return sample.NewMask(n, ids...) }

// Finish reasons of an Output.
const (
	FinishStop   = engine.FinishStop
	FinishLength = engine.FinishLength
	FinishAbort  = engine.FinishAbort
)

// Errors Generate refuses a request with (wrapped with details; test with errors.Is).
var (
	ErrTooLong   = engine.ErrTooLong
	ErrQueueFull = engine.ErrQueueFull
	ErrClosed    = engine.ErrClosed
)

// Engine serves generation requests on one model. Its methods are safe for concurrent use.
type Engine struct {
	l      *Loaded
	e      *engine.Engine
	spec   *speculation // nil: no speculative decoding
	pool   *kvpool.Pool // nil: no shared KV pool nor host tier
	sizing kvcache.Sizing
	// prefixCaching reports whether the prefix cache is on.
	prefixCaching bool
	defaults      SamplingDefaults
	grammars      grammars // structured output's compiled grammars (Constrain)
	// loras are the LoRA adapters served (nil without LoRA).
	loras *lora.Registry
}

// Open opens the model at path (a .gguf file, a llama2.c .bin checkpoint, or a Hugging
// Face folder) and starts an engine on it.
func Open(path string, opt Options) (*Engine, error) {
	fm, err := format.Open(path, format.Options{Tokenizer: opt.Tokenizer, Limits: opt.ModelLimits})
	if err != nil {
		return nil, encoderHint(path, err)
	}
	e, err := OpenModel(fm, opt)
	if err != nil {
		fm.Close()
		return nil, err
	}
	return e, nil
}

// OpenModel starts an engine on an opened model (for example a synthesized one), loaded
// as Load does. The Engine takes ownership of fm and closes it on Close; on failure fm is
// still the caller's.
func OpenModel(fm *format.Model, opt Options) (*Engine, error) {
	if fm.Config.ContextLen <= 0 && opt.MaxModelLen <= 0 {
		return nil, fmt.Errorf("open %s: the model has no context length: set MaxModelLen", fm.Path)
	}
	// The weights go first, so that a device's KV cache can take what they leave.
	l, err := Load(fm, opt)
	if err != nil {
		return nil, err
	}
	e, err := start(l, opt)
	if err != nil {
		l.m.Close()
		l.closeBackends()
		return nil, err
	}
	return e, nil
}

// start sizes the KV cache of a loaded model and starts an engine on it, with the draft
// model of a draft_model configuration loaded first (and closed again on failure).
func start(l *Loaded, opt Options) (*Engine, error) {
	sp, err := newSpeculation(l, opt)
	if err != nil {
		return nil, err
	}
	e, err := startEngine(l, opt, sp)
	if err != nil {
		sp.close()
		return nil, err
	}
	return e, nil
}

// startEngine sizes the KV cache (for the target's and the draft's keys and values, when
// sp has a draft model) and starts the engine.
func startEngine(l *Loaded, opt Options, sp *speculation) (*Engine, error) {
	fm, m := l.fm, l.m
	gen, err := opt.GenerationConfig.read(fm.Generation)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", fm.Path, err)
	}
	// The adapters' slots go before the KV cache, which takes what memory is left.
	loras, err := enableLoRA(l, opt)
	if err != nil {
		return nil, err
	}
	blockSize := opt.BlockSize
	if blockSize <= 0 {
		blockSize = kvcache.DefaultBlockSize
	}
	maxLen := opt.MaxModelLen
	if maxLen <= 0 {
		maxLen = fm.Config.ContextLen
	}
	maxSeqs := opt.MaxNumSeqs
	if maxSeqs <= 0 {
		maxSeqs = engine.DefaultMaxNumSeqs
		if opt.Device.CUDA {
			maxSeqs = GPUMaxNumSeqs
		}
	}
	// Every rank holds the same blocks of its own layers and KV heads: the cache is sized
	// by the largest rank's part, in the element its backend holds, from the memory each
	// rank has. A draft model's cache has the same blocks, so a block costs both.
	rc := m.RankConfig()
	rowBytes := m.KVRowBytes()
	draftPerToken := sp.draftBytesPerToken()
	perToken := model.KVBytesPerToken(rc, rowBytes) + draftPerToken
	mem := opt.KVCacheMemory
	if mem <= 0 {
		if mem, err = deviceKVBudget(l.bes, opt.GPUMemoryUtilization); err != nil {
			return nil, fmt.Errorf("open %s: %w", fm.Path, err)
		}
	}
	if mem <= 0 {
		mem = min(DefaultKVCacheMemory, kvcache.FullContextBytes(perToken, maxLen, maxSeqs, blockSize))
	}
	var sizing kvcache.Sizing
	if m.KVCacheDType().KVQuantized() { // codes and scales
		sizing, err = kvcache.PlanRows(rc.Layers, rc.KVHeads, rc.HeadDim, rowBytes, blockSize, mem, maxLen)
	} else {
		sizing, err = kvcache.Plan(rc.Layers, rc.KVHeads, rc.HeadDim, rowBytes/rc.HeadDim, blockSize, mem, maxLen)
	}
	if err == nil && model.KVVectors(rc) == 1 { // MLA: the latent held once
		sizing, err = sizing.ValuesAreKeys()
	}
	if err == nil && draftPerToken > 0 {
		sizing, err = sizing.WithDraft(draftPerToken)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", fm.Path, err)
	}
	// The engine caps the context at what the pool holds; the draft must cover it.
	if err := sp.checkContext(fm.Name(), min(maxLen, (sizing.NumBlocks-1)*blockSize)); err != nil {
		return nil, err
	}
	budget := opt.MaxNumBatchedTokens
	if budget <= 0 && opt.Device.CUDA {
		budget = GPUMaxNumBatchedTokens
	}
	var pool *kvpool.Pool
	// On the CPU the policy's step costs are CPU seconds: on a shared machine the wall
	// time of a step follows the share of the cores it got, which moves 3x from step to
	// step, and priced so, verify steps looked cheap at batch 8 (speculation cost 30% more
	// CPU for no more throughput). On a GPU the device's time is the wall time.
	var stepClock func() time.Duration
	if !opt.Device.CUDA && sp != nil {
		stepClock = processCPU()
	}
	e, err := engine.New(m, l.tok, engine.Config{
		NumBlocks: sizing.NumBlocks, BlockSize: blockSize, MaxModelLen: opt.MaxModelLen,
		SchedulerConfig: engine.SchedulerConfig{
			MaxNumSeqs: maxSeqs, MaxNumBatchedTokens: budget,
			DisableChunkedPrefill: opt.DisableChunkedPrefill, MaxLoRAs: m.LoRASlots(),
		},
		DisablePrefixCaching:   opt.DisablePrefixCaching,
		DisableAsyncScheduling: opt.DisableAsyncScheduling,
		DisableJumpForward:     opt.DisableJumpForward,
		MaxWaiting:             opt.MaxWaiting,
		OnRequestDone:          opt.OnRequestDone,
		OnStepDone:             opt.OnStepDone,
		OnKVEvent:              opt.OnKVEvent,
		Speculation:            sp.engine(),
		KVPolicy:               opt.KVPolicy,
		NewKVStore:             kvStore(l, opt, blockSize, &pool),
		Pooling:                opt.pooling,
		StepClock:              stepClock,
	})
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, err
	}
	return &Engine{l: l, e: e, spec: sp, pool: pool, sizing: sizing, prefixCaching: !opt.DisablePrefixCaching,
		defaults: NeutralSampling().With(gen), loras: loras}, nil
}

// Generate submits a request and returns the channel its outputs arrive on; the channel is
// closed after the last output (every choice ends with an Output whose FinishReason is
// set). Cancelling ctx aborts the request and frees its KV blocks at once. The caller must
// read the channel to its end or cancel ctx. Invalid or oversized requests are refused
// here: a *ParamError, or an error wrapping ErrTooLong (with the numbers), ErrQueueFull or
// ErrClosed.
func (e *Engine) Generate(ctx context.Context, req Request) (<-chan Output, error) {
	if err := e.checkAdapter(req.Adapter); err != nil {
		return nil, err
	}
	return e.e.Generate(ctx, req)
}

// QueueFull reports whether Generate would refuse a request now with ErrQueueFull (the
// waiting queue is at Options.MaxWaiting).
func (e *Engine) QueueFull() bool { return e.e.QueueFull() }

// GenerateAll submits requests as one (the prompts of one client request, say): all are
// admitted or none is, and with Options.MaxWaiting an empty queue takes them whatever
// their number, so that an idle engine never refuses a batch it can ever take. chans[i]
// carries the outputs of reqs[i], as Generate's channel does.
func (e *Engine) GenerateAll(ctx context.Context, reqs []Request) ([]<-chan Output, error) {
	for _, r := range reqs {
		if err := e.checkAdapter(r.Adapter); err != nil {
			return nil, err
		}
	}
	return e.e.GenerateAll(ctx, reqs)
}

// Abort ends the request with the given ID (its choices finish with FinishAbort).
func (e *Engine) Abort(id string) { e.e.Abort(id) }

// Stats returns the engine's current gauges and counters.
func (e *Engine) Stats() Stats { return e.e.Stats() }

// Close waits for the requests in flight to finish, then stops the engine and closes the
// model.
func (e *Engine) Close() error { return e.Shutdown(context.Background()) }

// Shutdown is Close with a deadline: when ctx ends first, requests still in flight are
// aborted.
func (e *Engine) Shutdown(ctx context.Context) error {
	err := e.e.Shutdown(ctx)
	if e.pool != nil {
		if cerr := e.pool.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := e.spec.close(); err == nil {
		err = cerr
	}
	if cerr := e.l.Close(); err == nil {
		err = cerr
	}
	return err
}

// SamplingDefaults returns the sampling parameters requests get for the fields they leave
// unset (see Options.GenerationConfig).
func (e *Engine) SamplingDefaults() SamplingDefaults { return e.defaults }

// Loaded returns the model the engine runs, with its backends.
func (e *Engine) Loaded() *Loaded { return e.l }

// ModelName returns the model's name (its file or folder name).
func (e *Engine) ModelName() string { return e.l.fm.Name() }

// ChatTemplate returns the model's Jinja chat template ("" when it has none).
func (e *Engine) ChatTemplate() string { return e.l.fm.ChatTemplate }

// MaxModelLen returns the most prompt plus output tokens a sequence may hold.
func (e *Engine) MaxModelLen() int { return e.e.MaxModelLen() }

// VocabSize returns the number of token ids the model knows.
func (e *Engine) VocabSize() int { return e.l.fm.Config.VocabSize }

// KVCacheSizing returns the KV cache sizing line (bytes per token, blocks, concurrency) to
// log at start.
func (e *Engine) KVCacheSizing() string {
	if p := e.l.m.Parallel(); p.Ranks() > 1 {
		return fmt.Sprintf("%s, on each of %d ranks (tensor-parallel %d x pipeline-parallel %d)", e.sizing, p.Ranks(), p.Tensor, p.Pipeline)
	}
	return e.sizing.String()
}

// BlockSize returns the tokens per KV block.
func (e *Engine) BlockSize() int { return e.sizing.BlockSize }

// KVCacheDType returns the name of the element type the engine's KV cache holds, as the
// device resolved Options.KVCacheDType ("F32", "F16", "BF16", "int8", "fp8_e4m3" or
// "fp8_e5m2"): blocks move only between caches of one type.
func (e *Engine) KVCacheDType() string { return e.l.m.KVCacheDType().String() }

// KVLayout names how a KV block's bytes (ReadBlocks, KV transfers) depend on the model's
// split: "" when they are the unsplit model's (not split, or split by pipeline only), else
// "tpT-ppP" for a model split by tensor, whose blocks keep each rank's KV heads apart:
// blocks move only between engines of one layout.
func (e *Engine) KVLayout() string { return e.l.m.KVLayout() }

// CacheConfig describes an engine's KV cache, as vLLM's cache_config_info metric does.
type CacheConfig struct {
	// BlockSize is the tokens per block and NumBlocks the blocks of the pool (the null
	// block included); MemoryBytes the budget it was sized from.
	BlockSize, NumBlocks int
	MemoryBytes          int64
	// DType names the element type keys and values are held in (F32, F16 or BF16).
	DType         string
	PrefixCaching bool
}

// CacheConfig returns the engine's KV cache configuration.
func (e *Engine) CacheConfig() CacheConfig {
	return CacheConfig{BlockSize: e.sizing.BlockSize, NumBlocks: e.sizing.NumBlocks, MemoryBytes: e.sizing.MemoryBytes,
		DType: e.l.kvDType.String(), PrefixCaching: e.prefixCaching}
}

// HasTokenizer reports whether the model came with a tokenizer (text prompts and outputs).
func (e *Engine) HasTokenizer() bool { return e.l.tok != nil }

// Tokenize turns text into token ids; with addSpecial the vocabulary's BOS/EOS are added
// as it asks, and special-token texts in the input are parsed as such.
func (e *Engine) Tokenize(text string, addSpecial bool) ([]int32, error) {
	if e.l.tok == nil {
		return nil, fmt.Errorf("model %s has no tokenizer", e.ModelName())
	}
	return toInt32(e.l.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: addSpecial})), nil
}

// TokenizePrompt tokenizes a text prompt as Generate does with Request.Prompt (BOS and EOS
// as the vocabulary asks; special-token texts are not parsed), stopping as soon as the
// tokens pass MaxModelLen: a prompt that cannot fit is refused with an error wrapping
// ErrTooLong without being encoded in full.
func (e *Engine) TokenizePrompt(text string) ([]int32, error) { return e.e.TokenizePrompt(text) }

// Detokenize turns token ids into text, leaving special tokens out when skipSpecial.
func (e *Engine) Detokenize(ids []int32, skipSpecial bool) (string, error) {
	if e.l.tok == nil {
		return "", fmt.Errorf("model %s has no tokenizer", e.ModelName())
	}
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	return e.l.tok.Decode(in, skipSpecial), nil
}

// TokenText returns the text of one token id (for logprobs), "" when out of range.
func (e *Engine) TokenText(id int32) string {
	if e.l.tok == nil || id < 0 || int(id) >= e.l.tok.NumTokens() {
		return ""
	}
	return string(e.l.tok.TokenBytes(int(id)))
}

// BlockHashes returns the chained hashes the prefix cache gives the full blocks of a prompt
// of these tokens with this cache salt: the names under which Options.OnKVEvent reports
// them. A router compares them with an instance's events to learn how much of a prompt
// that instance holds.
func (e *Engine) BlockHashes(tokens []int32, salt string) []BlockHash {
	return kvcache.ChainHashes(tokens, e.sizing.BlockSize, salt)
}

// BlockBytes is the bytes of one KV block in the backend-independent host layout blocks
// move between instances in (0 when the model cannot move blocks).
func (e *Engine) BlockBytes() int { return e.e.BlockBytes() }

// PinPrefix holds the cached blocks of the longest cached prefix of a prompt of these
// tokens with this cache salt until Unpin, for ReadBlocks (the prefill side of a KV
// transfer).
func (e *Engine) PinPrefix(tokens []int32, salt string) (KVPin, error) {
	return e.e.PinPrefix(tokens, salt)
}

// Unpin releases a pin's blocks.
func (e *Engine) Unpin(pin KVPin) { e.e.Unpin(pin) }

// ReadBlocks copies pinned blocks' keys and values into dst, BlockBytes each.
func (e *Engine) ReadBlocks(blocks []int32, dst []byte) error { return e.e.ReadBlocks(blocks, dst) }

// BlockLayers is the number of layer parts of a block (BlockBytes over LayerBlockBytes):
// the frames of one block in a KV transfer (0 when the model cannot move blocks).
func (e *Engine) BlockLayers() int {
	if lb := e.LayerBlockBytes(); lb > 0 {
		return e.BlockBytes() / lb
	}
	return 0
}

// StreamsLayers reports whether requests get their prompt's KV layer by layer as it is
// computed (Request.OnLayerKV): every rank's backend (the CPU's or CUDA's) copies a
// layer's blocks out while the next layers compute, the model split by tensor or pipeline
// or not.
func (e *Engine) StreamsLayers() bool { return e.e.StreamsLayers() }

// LayerBlockBytes is the bytes of one layer's part of a block (BlockBytes over the model's
// layers), as Request.OnLayerKV hands them over (0 when the model cannot move blocks).
func (e *Engine) LayerBlockBytes() int { return e.e.LayerBlockBytes() }
