// Package engine serves many generation requests on one model and one paged KV cache: a
// token-budget scheduler with chunked prefill, prefix caching and preemption by recompute
// (scheduler.go); a runner that turns each step into a model batch (runner.go); the step
// pipeline, which plans each step while the previous one runs (pipeline.go); what a step's
// results do to a sequence: prompt logprobs scored, draft tokens verified and rolled back,
// the next token sampled (accept.go); emitting tokens as text and stopping (emit.go); a
// sequence's life from made or forked to finished (sequence.go); beam search (beam.go); and
// pooling engines, whose requests are embeddings of their prompts (pooling.go).
//
// A step carries any number of tokens per sequence with logits at any of them, so decode,
// chunked prefill, prompt scoring and speculative verification are one mechanism. The
// engine reaches the model through the Model interface (model.go), and per-request state
// that shapes sampling lives in stateful processors (sample.Stateful) whose vocabulary
// masks a device sampler applies too.
package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// Defaults of Config.
const (
	DefaultMaxNumSeqs          = 256
	DefaultMaxNumBatchedTokens = 2048
)

// Config configures an Engine.
type Config struct {
	// NumBlocks is the number of KV blocks, the null block included; BlockSize the tokens
	// per block (kvcache.DefaultBlockSize when 0).
	NumBlocks, BlockSize int
	// MaxModelLen caps prompt plus output tokens of a sequence (0: the model's context
	// length, itself capped by the pool).
	MaxModelLen int
	SchedulerConfig
	// DisablePrefixCaching turns the prefix cache off.
	DisablePrefixCaching bool
	// DisableAsyncScheduling runs each step's forward pass and host work one after the
	// other, instead of planning step N+1 and finishing step N's outputs while step N+1
	// runs (asynchronous scheduling, the default).
	DisableAsyncScheduling bool
	// MaxWaiting refuses submissions with ErrQueueFull when that many requests wait
	// (0: no limit).
	MaxWaiting int
	// OnRequestDone, when set, is called from the engine loop for every finished request;
	// it must return quickly.
	OnRequestDone func(RequestStats)
	// OnStepDone, when set, is called from the engine loop after every step that brought
	// tokens; it must return quickly.
	OnStepDone func(StepStats)
	// OnKVEvent, when set, is called from the engine loop for every block that enters or
	// leaves the prefix cache; it must return quickly.
	OnKVEvent func(kvcache.Event)
	// DisableJumpForward turns jump-forward off: tokens a request's grammar forces (a
	// processor that is a sample.Forcer) are then sampled one step at a time like any other.
	DisableJumpForward bool
	// Speculation, when set, turns on speculative decoding (see Speculation).
	Speculation *Speculation
	// NewKVStore, when set, makes the store of KV blocks beyond the cache (see KVStore)
	// for blocks of blockBytes bytes; New calls it once the cache is made. It needs prefix
	// caching, and no draft model with a cache of its own.
	NewKVStore func(blockBytes int) (KVStore, error)
	// KVPolicy is the KV policy of requests that name none (Request.KVPolicy); the zero
	// value is full (every token kept).
	KVPolicy kvcache.PolicySpec
	// Pooling, when set (PoolLast or PoolMean), makes a pooling engine: every request is an
	// embedding of its prompt (Output.Embedding), computed through the scheduler and the
	// prefix cache, on a model that returns hidden states (HiddenModel; see pooling.go).
	Pooling string
	// Now is the clock (time.Now when nil); tests may replace it.
	Now func() time.Time
	// StepClock, when set, is the clock a step's forward passes are timed on for the
	// speculation policy (StepCost): a running total, read before and after each pass.
	// Nil times them on the wall clock. A CPU backend may give the process's CPU time,
	// which follows the work a pass does rather than the share of a shared machine's
	// cores it happened to get.
	StepClock func() time.Duration
}

// command is a message to the engine loop.
type command struct {
	add     *request
	abort   string
	fetched *fetchResult
	synced  chan struct{} // closed once idle, the blocks to save handed to the store
	// run, when set, is called on the loop (Engine.onLoop).
	run func()
}

// Engine runs requests on a model. Its methods are safe for concurrent use; all the work
// happens on one loop goroutine.
type Engine struct {
	cfg   Config
	model Model
	tok   *tokenizer.Tokenizer
	vocab int
	// massShape is ModelInfo's MassLanes and MassHeads.
	massShape massShape
	// hiddenDim is the size of a hidden state (a pooling engine's).
	hiddenDim int
	kv        *kvcache.Manager
	sched     *scheduler
	runner    *runner
	rng       *rand.Rand // seeds for requests without one; loop goroutine only
	// store, when set, keeps blocks beyond the cache, reached through bio (kvstore.go).
	store KVStore
	bio   BlockIO
	// fetches counts the store lookups running.
	fetches sync.WaitGroup

	mu       sync.Mutex
	inbox    []command
	closing  bool
	inFlight map[string]*request // submitted, not yet finished
	nextID   uint64
	order    uint64
	stats    Stats
	wake     chan struct{}
	done     chan struct{}

	// Loop-only state.
	active map[string]*request
	// fetching are the sequences parked while the store looks their blocks up, with
	// the lookups' cancels; reads are the blocks to save, read by the next step (or
	// when the loop goes idle); victims the blocks evicted while the step being planned
	// was scheduled, read by that step before it overwrites them (kvstore.go).
	fetching map[*sequence]context.CancelFunc
	reads    []blockRead
	victims  []blockRead
	syncs    []chan struct{}
	// jobs feeds the forward goroutine (async scheduling only); inflight is the step it
	// runs, whose result is not taken yet.
	jobs     chan<- *stepJob
	inflight *stepJob
	// planned counts the steps planned; overlapped those whose successor was planned
	// while they ran; discarded the tokens sampled for sequences that had finished since
	// their step was planned.
	planned, overlapped, discarded int64
	// emitStep counts the steps whose tokens were emitted; stepPrompt and stepGen are the
	// prompt tokens (vLLM's count: a choice's whole prompt at its first token) and the
	// tokens the step being emitted brought.
	emitStep            int64
	stepPrompt, stepGen int
	// afterStep, when set (tests), runs on the loop after every step.
	afterStep func()
	// keepAllDrafts, when set (tests), breaks the verification of sampled drafts on
	// purpose: every draft is kept.
	keepAllDrafts bool
	// writes are imported KV blocks to write before the next step (transfer.go); pins
	// counts the pins made.
	writes []importWrite
	pins   uint64
}

// New makes an engine for m, whose tokenizer (nil: token ids only, no text, no stop
// strings) is tok, with a KV cache of cfg.NumBlocks blocks on m's backends, and starts its
// loop.
func New(m *model.Model, tok *tokenizer.Tokenizer, cfg Config) (*Engine, error) {
	e, err := build(m, tok, cfg)
	if err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// build makes an engine on a real model without starting its loop: the model bound to a KV
// cache of cfg.NumBlocks blocks, and with speculation by a draft model, the draft bound to
// a cache of its own with the same block numbering (with the target's first layers, to the
// target's cache).
func build(m *model.Model, tok *tokenizer.Tokenizer, cfg Config) (*Engine, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	if err := cfg.Speculation.check(mc.Layers); err != nil {
		return nil, err
	}
	cache, err := m.NewKVCache(cfg.NumBlocks, cfg.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	d := drafter{}
	if sp := cfg.Speculation; sp != nil {
		switch {
		case sp.DraftModel != nil:
			if dv := sp.DraftModel.Config().VocabSize; dv != mc.VocabSize {
				return nil, fmt.Errorf("engine: the draft model's vocabulary of %d tokens is not the target's %d", dv, mc.VocabSize)
			}
			dcache, err := sp.DraftModel.NewKVCache(cfg.NumBlocks, cfg.BlockSize)
			if err != nil {
				return nil, fmt.Errorf("engine: draft model: %w", err)
			}
			d.model = &pagedModel{m: sp.DraftModel, kv: dcache}
		case sp.DraftLayers > 0:
			view, err := m.FirstLayers(sp.DraftLayers)
			if err != nil {
				return nil, fmt.Errorf("engine: draft layers: %w", err)
			}
			d = drafter{model: &pagedModel{m: view, kv: cache}, shared: true}
		}
	}
	pm := &pagedModel{m: m, kv: cache}
	e, err := assemble(pm, ModelInfo{VocabSize: mc.VocabSize, ContextLen: mc.ContextLen, MassLanes: m.AttentionMassLanes(), MassHeads: mc.KVHeads}, tok, cfg, d)
	if err != nil || cfg.NewKVStore == nil {
		return e, err
	}
	if cfg.DisablePrefixCaching {
		return nil, fmt.Errorf("engine: a KV store needs prefix caching")
	}
	if e.bio, err = useStore(pm, d); err != nil {
		return nil, err
	}
	if e.store, err = cfg.NewKVStore(cache.BlockBytes()); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e.runner.store, e.runner.bio = e.store, e.bio
	return e, nil
}

// drafter is the draft model of speculative decoding as the engine runs it: bound to its
// cache, and whether that cache is the target's own.
type drafter struct {
	model  Model
	shared bool
}

// withDefaults fills in cfg's zero values.
func withDefaults(cfg Config) (Config, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = kvcache.DefaultBlockSize
	}
	if cfg.MaxNumSeqs <= 0 {
		cfg.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if cfg.MaxNumBatchedTokens <= 0 {
		cfg.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NumBlocks < 2 {
		return cfg, fmt.Errorf("engine: %d KV blocks: need at least 2 (one is the null block)", cfg.NumBlocks)
	}
	return cfg, nil
}

// scoreBytes bounds the logits one prefill chunk of a prompt-logprobs request returns.
const scoreBytes = 64 << 20

// assemble makes an engine on m (with cfg's defaults filled in) and the draft model d (none
// when its model is nil) without starting its loop.
func assemble(m Model, info ModelInfo, tok *tokenizer.Tokenizer, cfg Config, d drafter) (*Engine, error) {
	if info.VocabSize <= 0 {
		return nil, fmt.Errorf("engine: vocabulary of %d tokens", info.VocabSize)
	}
	if err := checkPooling(cfg, m); err != nil {
		return nil, err
	}
	if cfg.MaxModelLen <= 0 {
		cfg.MaxModelLen = info.ContextLen
	}
	poolTokens := (cfg.NumBlocks - 1) * cfg.BlockSize
	if cfg.MaxModelLen <= 0 || cfg.MaxModelLen > poolTokens {
		cfg.MaxModelLen = poolTokens
	}
	e := &Engine{}
	mgr, err := kvcache.NewManager(kvcache.Config{NumBlocks: cfg.NumBlocks, BlockSize: cfg.BlockSize, DisablePrefixCaching: cfg.DisablePrefixCaching, OnEvent: e.onKVEvent})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	*e = Engine{
		cfg: cfg, model: m, tok: tok, vocab: info.VocabSize, massShape: massShape{info.MassLanes, info.MassHeads}, kv: mgr,
		sched: &scheduler{cfg: cfg.SchedulerConfig, kv: mgr, maxModelLen: cfg.MaxModelLen, vocab: info.VocabSize, massShape: massShape{info.MassLanes, info.MassHeads},
			spec: cfg.Speculation, scoreChunk: scoreBytes / (4 * info.VocabSize), poolsEveryRow: cfg.Pooling == PoolMean,
			waitsForShared: cfg.Pooling == PoolLast && !cfg.DisablePrefixCaching},
		runner:   &runner{model: m, draft: d.model, draftShared: d.shared, blockSize: cfg.BlockSize, clock: stepClock(cfg.StepClock)},
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		inFlight: make(map[string]*request),
		active:   make(map[string]*request),
		fetching: make(map[*sequence]context.CancelFunc),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	if _, err := e.policyFor(nil); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if hm, ok := m.(HiddenModel); ok && cfg.Pooling != "" {
		e.hiddenDim, e.runner.hidden = hm.HiddenDim(), hm
	}
	e.stats.NumBlocks = cfg.NumBlocks - 1
	e.stats.Finished = make(map[string]int64)
	return e, nil
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Tokenizer returns the engine's tokenizer (nil when it has none).
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// MaxModelLen is the most prompt plus output tokens a sequence may hold.
func (e *Engine) MaxModelLen() int { return e.cfg.MaxModelLen }

// QueueFull reports whether a request submitted now would be refused with ErrQueueFull,
// so that a server can refuse it before reading its body.
func (e *Engine) QueueFull() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.MaxWaiting > 0 && e.numWaitingLocked() >= e.cfg.MaxWaiting
}

// Generate submits a request and returns the channel its outputs arrive on, closed after
// the last one (each choice ends with an Output whose FinishReason is set). Cancelling ctx
// aborts the request and frees its KV blocks; the consumer must read the channel to the
// end or cancel ctx. A request that can never fit, or has invalid parameters, is refused
// here with an error (a *ParamError, or one wrapping ErrTooLong, ErrQueueFull or
// ErrClosed).
func (e *Engine) Generate(ctx context.Context, req Request) (<-chan Output, error) {
	chans, err := e.GenerateAll(ctx, []Request{req})
	if err != nil {
		return nil, err
	}
	return chans[0], nil
}

// GenerateAll submits requests as one: all of them are admitted, or none is (the first
// refusal is returned), so that a client's prompts are never half queued. With
// Config.MaxWaiting they are refused with ErrQueueFull when requests wait and these would
// take the queue past the limit; an empty queue takes them whatever their number, so that
// an idle engine takes any batch it can ever take. Each request behaves as Generate's;
// chans[i] carries the outputs of reqs[i].
func (e *Engine) GenerateAll(ctx context.Context, reqs []Request) (chans []<-chan Output, err error) {
	rs := make([]*request, len(reqs))
	for i, req := range reqs {
		if rs[i], err = e.prepare(req); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	for i, r := range rs {
		if r.id == "" {
			e.nextID++
			r.id = "req-" + strconv.FormatUint(e.nextID, 10)
		}
		if e.inFlight[r.id] != nil || slices.ContainsFunc(rs[:i], func(o *request) bool { return o.id == r.id }) {
			e.mu.Unlock()
			return nil, paramErr("request_id", "%q is already in flight", r.id)
		}
	}
	if waiting := e.numWaitingLocked(); e.cfg.MaxWaiting > 0 && waiting > 0 && waiting+len(rs) > e.cfg.MaxWaiting {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: %d requests waiting, %d more would pass the limit of %d", ErrQueueFull, waiting, len(rs), e.cfg.MaxWaiting)
	}
	for _, r := range rs {
		e.order++
		r.order = e.order
		e.inFlight[r.id] = r
		e.inbox = append(e.inbox, command{add: r})
	}
	e.mu.Unlock()
	e.signal()

	chans = make([]<-chan Output, len(rs))
	for i, r := range rs {
		ch := make(chan Output)
		id := r.id
		go r.out.pump(ctx, ch, func() { e.Abort(id) })
		chans[i] = ch
	}
	return chans, nil
}

// numWaitingLocked counts submitted requests not yet admitted (caller holds e.mu).
func (e *Engine) numWaitingLocked() int {
	n := 0
	for _, c := range e.inbox {
		if c.add != nil {
			n++
		}
	}
	return n + e.stats.Waiting
}

// prepare validates a request and builds its state.
func (e *Engine) prepare(req Request) (*request, error) {
	p := req.Params
	if err := p.validate(e.vocab, e.cfg.MaxNumSeqs); err != nil {
		return nil, err
	}
	prompt := req.PromptTokens
	if prompt == nil {
		var err error
		if prompt, err = e.TokenizePrompt(req.Prompt); err != nil {
			return nil, err
		}
	}
	if len(prompt) == 0 {
		return nil, paramErr("prompt", "empty prompt")
	}
	for i, t := range prompt {
		if t < 0 || int(t) >= e.vocab {
			return nil, paramErr("prompt", "token %d: id %d outside the vocabulary of %d", i, t, e.vocab)
		}
	}
	if e.cfg.Pooling != "" {
		if err := checkPoolingRequest(req, p); err != nil {
			return nil, err
		}
		// The one "token" it waits for is its embedding; the prompt alone takes room.
		p.MaxTokens = 1
		if len(prompt) > e.cfg.MaxModelLen {
			return nil, fmt.Errorf("%w: input of %d tokens exceeds the context length of %d tokens", ErrTooLong, len(prompt), e.cfg.MaxModelLen)
		}
	}
	policy, err := e.policyFor(req.KVPolicy)
	if err != nil {
		return nil, err
	}
	if policy.Drops() && p.UseBeamSearch {
		return nil, paramErr("kv_policy", "%s: not supported with beam search", policy.Spec().Name)
	}
	maxLen := e.cfg.MaxModelLen
	poolTokens := (e.cfg.NumBlocks - 1) * e.cfg.BlockSize
	maxTokens := p.MaxTokens
	if maxTokens == 0 {
		maxTokens = maxLen - len(prompt)
		if maxTokens < 1 {
			return nil, fmt.Errorf("%w: prompt of %d tokens leaves no room in the context length of %d tokens", ErrTooLong, len(prompt), maxLen)
		}
	}
	if policy.Drops() {
		// The sequence holds at most its budget; positions by place in the cache let it
		// run past the context length.
		if b := policy.Spec().BudgetTokens; b > poolTokens {
			return nil, fmt.Errorf("%w: kv_policy budget_tokens %d exceeds the whole KV pool of %d tokens", ErrTooLong, b, poolTokens)
		}
		maxLen = math.MaxInt
	} else if e.cfg.Pooling != "" {
		maxLen = math.MaxInt // the prompt fits (checked above): nothing follows it
	} else if need := len(prompt) + maxTokens; need > maxLen {
		return nil, fmt.Errorf("%w: prompt of %d tokens + max_tokens %d = %d tokens exceeds the context length of %d tokens (KV pool: %d tokens)", ErrTooLong, len(prompt), maxTokens, need, maxLen, poolTokens)
	} else if need > poolTokens {
		return nil, fmt.Errorf("%w: prompt of %d tokens + max_tokens %d = %d tokens exceeds the whole KV pool of %d tokens", ErrTooLong, len(prompt), maxTokens, need, poolTokens)
	}
	if p.UseBeamSearch && len(req.Processors) > 0 {
		return nil, paramErr("use_beam_search", "not supported with logits processors")
	}
	for i, proc := range req.Processors {
		if proc == nil {
			return nil, paramErr("processors", "processor %d is nil", i)
		}
	}
	n := max(p.N, 1)
	r := &request{
		id: req.ID, params: p, n: n, maxTokens: maxTokens, maxLen: maxLen, policy: policy, priority: req.Priority,
		salt: req.CacheSalt, prompt: prompt, procs: req.Processors, out: newOutbox(), reasons: make([]string, n),
		clocks: make([]choiceClock, n), arrival: e.cfg.Now(), importKV: req.ImportKV, adapter: req.Adapter,
		onLayerKV: req.OnLayerKV,
	}
	if a := req.Adapter; a != nil {
		// The adapter's keys and values differ from the base's for the same tokens.
		r.salt += a.CacheSalt()
	}
	if e.tok != nil {
		// Compiled here, on the submitter's goroutine, not on the engine loop.
		r.stops = sample.NewStopSet(p.Stop)
	}
	return r, nil
}

// policyFor resolves a request's KV policy over the engine's (nil: the engine's).
func (e *Engine) policyFor(spec *kvcache.PolicySpec) (kvcache.Policy, error) {
	base := e.cfg.KVPolicy
	if base.Name == "" {
		base = kvcache.FullSpec()
	}
	s := base
	if spec != nil {
		s = spec.Over(base)
	}
	pol, err := kvcache.NewPolicy(s, e.cfg.BlockSize)
	if err != nil {
		return nil, paramErr("kv_policy", "%v", err)
	}
	if asks, _ := pol.MassWindow(); asks && e.massShape.lanes == 0 {
		return nil, paramErr("kv_policy", "%s ranks the cache by attention mass, which this model's backend does not report (the CPU and CUDA backends do, with the model not split and an f32, f16 or bf16 KV cache: the token compaction of h2o and snapkv does not handle a quantized cache)", s.Name)
	}
	return pol, nil
}

// TokenizePrompt tokenizes a text prompt as Generate does (BOS and EOS as the vocabulary
// asks; special-token texts are not parsed). Encoding stops as soon as the tokens pass the
// context length: a prompt that cannot fit is refused with an error wrapping ErrTooLong
// without being encoded in full.
func (e *Engine) TokenizePrompt(text string) ([]int32, error) {
	if e.tok == nil {
		return nil, paramErr("prompt", "the model has no tokenizer: give prompt token ids")
	}
	maxLen := e.cfg.MaxModelLen
	ids := e.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true, MaxTokens: maxLen})
	if len(ids) > maxLen {
		return nil, fmt.Errorf("%w: a prompt of more than %d tokens exceeds the context length of %d tokens", ErrTooLong, maxLen, maxLen)
	}
	prompt := make([]int32, len(ids))
	for i, id := range ids {
		prompt[i] = int32(id)
	}
	return prompt, nil
}

// Abort ends a request: its choices finish with FinishAbort and its blocks are freed at the
// start of the next step. Aborting an unknown or finished request does nothing.
func (e *Engine) Abort(id string) {
	e.mu.Lock()
	e.inbox = append(e.inbox, command{abort: id})
	e.mu.Unlock()
	e.signal()
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the engine's gauges and counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Finished = make(map[string]int64, len(e.stats.Finished))
	for k, v := range e.stats.Finished {
		s.Finished[k] = v
	}
	return s
}

// Close stops accepting requests, waits for those in flight to finish, and stops the loop.
func (e *Engine) Close() error { return e.Shutdown(context.Background()) }

// Shutdown is Close with a deadline: when ctx ends first, the requests still in flight are
// aborted. It returns ctx's error in that case.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.signal()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	for id := range e.inFlight {
		e.inbox = append(e.inbox, command{abort: id})
	}
	e.mu.Unlock()
	e.signal()
	<-e.done
	return ctx.Err()
}

// loop is the engine goroutine: take commands, advance the step pipeline, repeat.
//
// With asynchronous scheduling (the default) the forward passes run on a second goroutine,
// one step at a time, and the loop keeps one step in flight: while step N runs it plans and
// builds step N+1, then takes N's result, appends N's tokens, launches N+1, and only then
// does N's remaining host work (caching blocks, detokenizing, stops, streaming, finishing)
// while N+1 runs. So the device waits for the host only for the sampling between two
// steps. Everything that touches the KV manager, the scheduler or a sequence stays on this
// goroutine; the forward goroutine sees only built batches (see step).
func (e *Engine) loop() {
	defer close(e.done)
	defer e.fetches.Wait() // every lookup ended: its request did
	if !e.cfg.DisableAsyncScheduling {
		jobs := make(chan *stepJob, 1)
		stopped := make(chan struct{})
		go e.forwardLoop(jobs, stopped)
		e.jobs = jobs
		defer func() {
			// Nothing is in flight here: the loop returns only when idle.
			close(jobs)
			<-stopped
		}()
	}
	for {
		e.mu.Lock()
		cmds := e.inbox
		e.inbox = nil
		closing := e.closing
		e.mu.Unlock()
		for _, c := range cmds {
			switch {
			case c.add != nil:
				e.admit(c.add)
			case c.run != nil:
				c.run()
			case c.fetched != nil:
				e.fetched(c.fetched)
			case c.synced != nil:
				e.syncs = append(e.syncs, c.synced)
			default:
				e.abort(c.abort)
			}
		}
		if len(cmds) > 0 {
			e.publishStats()
		}
		if len(e.active) == len(e.fetching) && e.inflight == nil {
			// Idle, or waiting only for lookups: nothing is in flight, so the blocks to
			// save can be read now.
			if e.store != nil {
				readBlocks(e.bio, e.store, e.reads)
				e.reads = nil
			}
			if len(e.active) == 0 {
				for _, c := range e.syncs {
					close(c)
				}
				e.syncs = nil
			}
			if closing && len(cmds) == 0 && len(e.active) == 0 {
				return
			}
			if len(cmds) == 0 {
				<-e.wake
			}
			continue
		}
		e.step()
	}
}

// admit queues a new request's first sequence (its first beam, for beam search).
func (e *Engine) admit(r *request) {
	e.active[r.id] = r
	e.importKV(r)
	seq := e.newSequence(r, 0, r.prompt, r.procs)
	if r.params.UseBeamSearch {
		startBeams(r, seq)
	} else {
		seq.forkPending = r.n > 1
	}
	r.seqs = []*sequence{seq}
	if !e.startFetch(seq) {
		e.sched.add(seq)
	}
}

// abort finishes every unfinished choice of a request with FinishAbort, freeing its blocks
// at once even when a step in flight computes for it: that step's result for it is ignored,
// and the freed blocks go to new owners only in steps that run after it.
func (e *Engine) abort(id string) {
	r := e.active[id]
	if r == nil {
		return
	}
	e.failRequest(r, nil)
}

// failRequest aborts all of r's unfinished choices, with err on their last outputs.
func (e *Engine) failRequest(r *request, err error) {
	if r.finished == r.n {
		return
	}
	if r.beam != nil {
		e.endBeams(r, err)
		return
	}
	if r.seqs[0].forkPending && r.seqs[0].status != statusFinished {
		// Choices 1..n-1 never started: finish them too.
		for i := 1; i < r.n; i++ {
			r.reasons[i] = FinishAbort
			r.finished++
			r.out.push(Output{RequestID: r.id, Index: i, FinishReason: FinishAbort, Err: err, Usage: e.usage(r)})
		}
		r.seqs[0].forkPending = false
	}
	for _, seq := range r.seqs {
		if seq.status != statusFinished {
			e.finishSeq(seq, FinishAbort, nil, "", err)
		}
	}
}

// failAll aborts every active request with err.
func (e *Engine) failAll(err error) {
	for _, r := range e.active {
		e.failRequest(r, err)
	}
	e.publishStats()
}

// countTokens adds prompt and generated tokens to the step's counts (OnStepDone) and to
// the shared stats at once, as they are emitted, so that a client whose request ends in
// this step finds them counted.
func (e *Engine) countTokens(prompt, gen int) {
	e.stepPrompt += prompt
	e.stepGen += gen
	e.mu.Lock()
	e.stats.PromptTokens += int64(prompt)
	e.stats.GenerationTokens += int64(gen)
	e.mu.Unlock()
}

// publishStats copies the loop's gauges and counters into the shared snapshot.
func (e *Engine) publishStats() {
	used := e.cfg.NumBlocks - 1 - e.kv.NumFreeBlocks()
	e.mu.Lock()
	s := &e.stats
	s.Running = len(e.sched.running)
	s.Waiting = len(e.sched.waiting) + len(e.fetching)
	s.RunningLoRAs, s.WaitingLoRAs = adapterNames(e.sched.running), adapterNames(e.sched.waiting)
	s.UsedBlocks = used
	s.KVUsage = e.kv.Usage()
	s.Preemptions = e.sched.preemptions
	s.PrefixQueries = e.sched.prefixQueries
	s.PrefixHits = e.sched.hits
	e.mu.Unlock()
}
