// Package kvasir is the Go API of the kvasir inference engine: open a model, submit
// generation requests with a context, and receive their outputs as a stream. Many requests
// run at once on one model and one paged KV cache, with continuous batching, chunked
// prefill, prefix caching and preemption.
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

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/engine"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/model"
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
	// Stats is a snapshot of the engine's gauges and counters (for metrics).
	Stats = engine.Stats
	// ParamError is an invalid request parameter, naming it.
	ParamError = engine.ParamError
)

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

// DefaultKVCacheMemory is the KV cache budget when Options.KVCacheMemory is 0 (capped at what
// MaxNumSeqs sequences of MaxModelLen tokens need).
const DefaultKVCacheMemory = 1 << 30

// DefaultGPUMemoryUtilization is the share of a GPU's memory used when
// Options.GPUMemoryUtilization is 0, as vLLM's default.
const DefaultGPUMemoryUtilization = 0.9

// activationReserve is the device memory kept back from the KV cache for activations,
// logits and cuBLAS workspaces.
const activationReserve = 2 << 30

// Options configures an Engine. Zero values pick defaults.
type Options struct {
	// Threads is the number of CPU worker threads (0: all cores).
	Threads int
	// Backend runs the model (for example a CUDA backend); nil runs it on a CPU backend of
	// Threads threads. The caller keeps ownership and closes it after the Engine.
	Backend backend.Backend
	// TensorParallel and PipelineParallel split the model across ranks (0 or 1: not
	// split; see model.Parallel): each rank holds a slice of every layer's heads and MLP,
	// of the layers of one pipeline stage, and the matching part of the KV cache.
	TensorParallel, PipelineParallel int
	// Backends run a split model, one per rank, stage-major (for example one CUDA backend
	// per GPU); nil with a split model makes CPU backends that share the Threads threads.
	// The caller closes them after the Engine.
	Backends []backend.Backend
	// KVCacheMemory is the KV cache budget in bytes of each rank (0: DefaultKVCacheMemory
	// on the CPU; on a device with memory of its own, what GPUMemoryUtilization leaves).
	KVCacheMemory int64
	// GPUMemoryUtilization is the fraction of a device's memory kvasir may use in all
	// (weights, KV cache and a reserve for activations); the KV cache gets what the weights
	// leave of it. 0 means DefaultGPUMemoryUtilization. Ignored on the CPU.
	GPUMemoryUtilization float64
	// KVCacheDType is the KV cache's element type: "" or "auto" for the backend's own (f32
	// on the CPU; a GPU backend's is chosen when it is made, bf16 by default), "f32", or
	// "f16": half the memory per token of f32, so twice the tokens in the same
	// KVCacheMemory, and half the bytes attention reads (the CPU cache holds f32 or f16).
	KVCacheDType string
	// UploadProgress, when set, is told the bytes of weights uploaded so far.
	UploadProgress func(done, total int64)
	// BlockSize is the tokens per KV block (0: 16).
	BlockSize int
	// MaxNumSeqs caps concurrently running sequences (0: 256).
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step (0: 2048).
	MaxNumBatchedTokens int
	// MaxModelLen caps prompt plus output tokens (0: the model's context length, capped by
	// the KV cache).
	MaxModelLen int
	// DisablePrefixCaching turns prefix caching off; DisableChunkedPrefill makes prompts wait
	// for a step with room for all of their remaining tokens.
	DisablePrefixCaching, DisableChunkedPrefill bool
	// DisableAsyncScheduling runs each engine step's forward pass and host work one after
	// the other instead of overlapping them (see engine.Config).
	DisableAsyncScheduling bool
	// MaxWaiting refuses requests with ErrQueueFull when that many wait (0: no limit).
	MaxWaiting int
	// Tokenizer names a separate tokenizer file (a llama2.c checkpoint's tokenizer.bin).
	Tokenizer string
	// OnRequestDone, when set, receives every finished request's stats, from the engine
	// loop: it must return quickly.
	OnRequestDone func(RequestStats)
}

// Engine serves generation requests on one model. Its methods are safe for concurrent use.
type Engine struct {
	fm     *format.Model
	m      *model.Model
	tok    *tokenizer.Tokenizer
	e      *engine.Engine
	sizing kvcache.Sizing
}

// Open opens the model at path (a .gguf file, a llama2.c .bin checkpoint, or a Hugging
// Face folder) and starts an engine on it.
func Open(path string, opt Options) (*Engine, error) {
	fm, err := format.Open(path, format.Options{Tokenizer: opt.Tokenizer})
	if err != nil {
		return nil, err
	}
	e, err := OpenModel(fm, opt)
	if err != nil {
		fm.Close()
		return nil, err
	}
	return e, nil
}

// OpenModel starts an engine on an opened model (for example a synthesized one). The
// Engine takes ownership of fm and closes it on Close.
func OpenModel(fm *format.Model, opt Options) (*Engine, error) {
	cfg := fm.Config
	var tok *tokenizer.Tokenizer
	if fm.Vocab != nil {
		var err error
		if tok, err = tokenizer.New(fm.Vocab); err != nil {
			return nil, fmt.Errorf("open %s: %w", fm.Path, err)
		}
	}
	blockSize := opt.BlockSize
	if blockSize <= 0 {
		blockSize = kvcache.DefaultBlockSize
	}
	maxLen := opt.MaxModelLen
	if maxLen <= 0 {
		maxLen = cfg.ContextLen
	}
	if maxLen <= 0 {
		return nil, fmt.Errorf("open %s: the model has no context length: set MaxModelLen", fm.Path)
	}
	maxSeqs := opt.MaxNumSeqs
	if maxSeqs <= 0 {
		maxSeqs = engine.DefaultMaxNumSeqs
	}
	bes := opt.Backends
	if bes == nil && opt.Backend != nil {
		bes = []backend.Backend{opt.Backend}
	}
	kvDType, err := model.ParseKVCacheDType(opt.KVCacheDType)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", fm.Path, err)
	}
	// The weights go first, so that a device's KV cache can take what they leave.
	m, err := model.New(fm, model.Options{Threads: opt.Threads, Backends: bes, KVCacheDType: kvDType,
		Parallel: model.Parallel{Tensor: opt.TensorParallel, Pipeline: opt.PipelineParallel}, Progress: opt.UploadProgress})
	if err != nil {
		return nil, err
	}
	// Every rank holds the same blocks of its own layers and KV heads: the cache is sized
	// by the largest rank's part, in the element its backend holds, from the memory each
	// rank has.
	rc := m.RankConfig()
	elem := m.KVBytesPerElement()
	perToken := model.KVBytesPerToken(rc, elem)
	mem := opt.KVCacheMemory
	if mem <= 0 {
		mem, err = deviceKVBudget(bes, opt.GPUMemoryUtilization)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("open %s: %w", fm.Path, err)
		}
	}
	if mem <= 0 {
		mem = min(DefaultKVCacheMemory, perToken*int64(maxLen)*int64(maxSeqs)+perToken*int64(blockSize))
	}
	sizing, err := kvcache.Plan(rc.Layers, rc.KVHeads, rc.HeadDim, elem, blockSize, mem, maxLen)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("open %s: %w", fm.Path, err)
	}
	e, err := engine.New(m, tok, engine.Config{
		NumBlocks: sizing.NumBlocks, BlockSize: blockSize, MaxModelLen: opt.MaxModelLen,
		SchedulerConfig: engine.SchedulerConfig{
			MaxNumSeqs: opt.MaxNumSeqs, MaxNumBatchedTokens: opt.MaxNumBatchedTokens,
			DisableChunkedPrefill: opt.DisableChunkedPrefill,
		},
		DisablePrefixCaching:   opt.DisablePrefixCaching,
		DisableAsyncScheduling: opt.DisableAsyncScheduling,
		MaxWaiting:             opt.MaxWaiting,
		OnRequestDone:          opt.OnRequestDone,
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	return &Engine{fm: fm, m: m, tok: tok, e: e, sizing: sizing}, nil
}

// Generate submits a request and returns the channel its outputs arrive on; the channel is
// closed after the last output (every choice ends with an Output whose FinishReason is
// set). Cancelling ctx aborts the request and frees its KV blocks at once. The caller must
// read the channel to its end or cancel ctx. Invalid or oversized requests are refused
// here: a *ParamError, or an error wrapping ErrTooLong (with the numbers), ErrQueueFull or
// ErrClosed.
func (e *Engine) Generate(ctx context.Context, req Request) (<-chan Output, error) {
	return e.e.Generate(ctx, req)
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
	e.m.Close()
	if cerr := e.fm.Close(); err == nil {
		err = cerr
	}
	return err
}

// ModelName returns the model's name (its file or folder name).
func (e *Engine) ModelName() string { return e.fm.Name() }

// ChatTemplate returns the model's Jinja chat template ("" when it has none).
func (e *Engine) ChatTemplate() string { return e.fm.ChatTemplate }

// MaxModelLen returns the most prompt plus output tokens a sequence may hold.
func (e *Engine) MaxModelLen() int { return e.e.MaxModelLen() }

// VocabSize returns the number of token ids the model knows.
func (e *Engine) VocabSize() int { return e.fm.Config.VocabSize }

// KVCacheSizing returns the KV cache sizing line (bytes per token, blocks, concurrency) to
// log at start.
func (e *Engine) KVCacheSizing() string {
	if p := e.m.Parallel(); p.Ranks() > 1 {
		return fmt.Sprintf("%s, on each of %d ranks (tensor-parallel %d x pipeline-parallel %d)", e.sizing, p.Ranks(), p.Tensor, p.Pipeline)
	}
	return e.sizing.String()
}

// HasTokenizer reports whether the model came with a tokenizer (text prompts and outputs).
func (e *Engine) HasTokenizer() bool { return e.tok != nil }

// Tokenize turns text into token ids; with addSpecial the vocabulary's BOS/EOS are added
// as it asks, and special-token texts in the input are parsed as such.
func (e *Engine) Tokenize(text string, addSpecial bool) ([]int32, error) {
	if e.tok == nil {
		return nil, fmt.Errorf("model %s has no tokenizer", e.ModelName())
	}
	ids := e.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: addSpecial})
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

// Detokenize turns token ids into text, leaving special tokens out when skipSpecial.
func (e *Engine) Detokenize(ids []int32, skipSpecial bool) (string, error) {
	if e.tok == nil {
		return "", fmt.Errorf("model %s has no tokenizer", e.ModelName())
	}
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	return e.tok.Decode(in, skipSpecial), nil
}

// TokenText returns the text of one token id (for logprobs), "" when out of range.
func (e *Engine) TokenText(id int32) string {
	if e.tok == nil || id < 0 || int(id) >= e.tok.NumTokens() {
		return ""
	}
	return string(e.tok.TokenBytes(int(id)))
}

// deviceKVBudget returns the KV cache bytes each device backend of bes can give after the
// weights (see kvBudget; the least of them), or 0 for backends without memory of their own
// (the CPU).
func deviceKVBudget(bes []backend.Backend, util float64) (int64, error) {
	var least int64
	for i, be := range bes {
		r, ok := be.(backend.MemoryReporter)
		if !ok {
			return 0, nil
		}
		free, total, err := r.MemoryInfo()
		if err != nil {
			return 0, err
		}
		budget, err := kvBudget(free, total, util)
		if err != nil {
			return 0, fmt.Errorf("rank %d: %w", i, err)
		}
		if i == 0 || budget < least {
			least = budget
		}
	}
	return least, nil
}

// kvBudget returns util (0: DefaultGPUMemoryUtilization) of a device's total memory, less
// what is already in use and a reserve for activations: what the KV cache may take.
func kvBudget(free, total int64, util float64) (int64, error) {
	if util == 0 {
		util = DefaultGPUMemoryUtilization
	}
	if util <= 0 || util > 1 {
		return 0, fmt.Errorf("gpu memory utilization %g: want a fraction in (0, 1]", util)
	}
	used := total - free
	budget := int64(util*float64(total)) - used - activationReserve
	if budget <= 0 {
		return 0, fmt.Errorf("no device memory left for the KV cache: %.1f GiB of %.1f GiB in use after the weights, utilization %g (raise --gpu-memory-utilization or use a smaller model)",
			float64(used)/(1<<30), float64(total)/(1<<30), util)
	}
	return budget, nil
}
