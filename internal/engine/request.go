package engine

import (
	"github.com/kvasir-llm/kvasir/internal/lora"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// request is a submitted request: the parent of its n sequences (choices, or beams).
type request struct {
	id        string
	params    SamplingParams
	n         int
	maxTokens int // resolved: never 0
	// maxLen caps the sequence's prompt plus output tokens: the context length, or no
	// limit under a policy that drops tokens (its tokens are rotated by their place in the
	// cache).
	maxLen int
	// policy is the request's KV policy (what its sequences keep in their blocks).
	policy kvcache.Policy
	// peakBlocks is the most blocks one of its sequences held after a step's allocation.
	peakBlocks int
	priority   int
	salt       string
	adapter    *lora.Adapter // nil: the base model
	order      uint64        // arrival order (FCFS tie-break)
	prompt     []int32
	procs      []sample.Stateful // choice 0's stateful processors (Request.Processors)
	// stops are the stop strings compiled once (nil: none); every choice's matcher walks
	// this one set.
	stops *sample.StopSet
	out   *outbox

	seqs     []*sequence // choice i at index i once forked; only seqs[0] before
	finished int         // choices finished
	reasons  []string
	cached   int  // prompt tokens taken from the prefix cache on first admission
	admitted bool // scheduled at least once
	genCount int  // output tokens emitted over all choices

	// promptLPs are the prompt logprobs computed so far (entry i: prompt token i+1), sent
	// with the first output of choice 0.
	promptLPs []Logprob
	// beam is the state of a beam-search request (nil otherwise).
	beam *beamSearch
	// importKV is the KV computed elsewhere that the request was submitted with, until
	// admission takes it; importHold the holder of the blocks it went into (until the
	// request completes).
	importKV   *KVImport
	importHold kvcache.RequestID
	// onLayerKV is Request.OnLayerKV.
	onLayerKV LayerKVFunc

	arrival, firstScheduled, firstToken time.Time
	// clocks are each choice's token timestamps, for its metrics.
	clocks []choiceClock
}

// choiceClock times one choice as vLLM times each child request of an n > 1 request: its
// first and last token, the gaps between the steps that brought it tokens, and its end.
type choiceClock struct {
	tokens           int
	first, last, end time.Time
	lastStep         int64 // the emitting step (Engine.emitStep) of its last token
	itl              []time.Duration
}

// wantsLogprobs reports whether r reports logprobs of its output tokens.
func (r *request) wantsLogprobs() bool { return r.params.Logprobs || r.params.TopLogprobs > 0 }

// wantsPromptLogprobs reports whether r still has prompt tokens to score.
func (r *request) wantsPromptLogprobs() bool {
	return r.params.PromptLogprobs && len(r.promptLPs) < len(r.prompt)-1
}

// status is where a sequence is in its life.
type status int

const (
	statusWaiting status = iota
	statusRunning
	statusFinished
)

// sequence is one choice of a request as the scheduler sees it: its tokens, how many of them
// have KV in the cache, and the per-choice sampling and output state. A sequence is a
// kvcache request of its own.
type sequence struct {
	// fetched are blocks of its prompt a KVStore found, imported on admission; saved
	// is the number of its leading blocks already in the cache or offered to the store.
	fetched *fetchedBlocks
	saved   int

	id        kvcache.RequestID
	req       *request
	index     int
	tokens    []int32 // prompt then output
	numPrompt int
	// numComputed is the number of tokens whose KV is in the cache once the steps
	// scheduled so far have run: the scheduler advances it when it schedules a step.
	numComputed int
	// dropped is the number of tokens whose KV its policy dropped from its cache (whole
	// blocks behind the sinks): a token p computed now sits at cache index p-dropped (see
	// kvcache.Policy).
	dropped int
	// mass is the attention mass its KV policy ranks its cache by (nil when the policy
	// asks for none); massPending is set while a step in flight collects more (the
	// sequence sits out steps until it is folded in), massEpoch counts preemptions, so
	// that a step planned before one does not fold its mass into the recomputed cache.
	mass        *massState
	massPending bool
	massEpoch   int
	// pending counts the steps in flight that sample for the sequence (at most one); each
	// brings at least one token, not yet in tokens.
	pending int
	// draft holds the proposed tokens the step being planned or in flight verifies after
	// the sequence's last token (speculative decoding); empty otherwise. With a draft model
	// they are placeholders until the step's draft phase has run (draftByModel), and
	// draftDists holds the distribution each was drawn from (nil rows: drawn greedily, or
	// a point mass from a proposer).
	draft        []int32
	draftByModel bool
	draftDists   []sample.Dist
	// draftComputed is the number of the sequence's tokens whose keys and values the draft
	// model holds (a draft model with a cache of its own).
	draftComputed int
	// draftRuns counts the draft phases the sequence has had, to seed each one's draws.
	draftRuns uint64
	// wantsDraft is the policy's wish, made while a step decoding it was in flight, that it
	// draft: it sits out the step being planned, so that its tokens are all known for the
	// next one.
	wantsDraft bool
	// proposeMisses counts the proposer's empty proposals for the sequence in a row, and
	// proposeWait the steps it is left out of drafting for them (1, 2, 4, ... up to 16
	// steps): with asynchronous scheduling a sequence sits a step out to draft, which an
	// empty proposal (no n-gram match) wastes.
	proposeMisses, proposeWait int
	status                     status
	// forkPending is true for choice 0 of an n > 1 request until it samples its first
	// token, when choices 1..n-1 fork from it; until then it holds n running slots.
	forkPending bool

	sampler   *sample.Sampler
	penalties *sample.Penalties
	suppress  *sample.Suppress
	// procs are the sequence's stateful processors (its penalties and the request's
	// processors), told every accepted token; maskers those of them that restrict the next
	// token, whose masks are intersected into mask.
	procs   []sample.Stateful
	maskers []sample.Masker
	// forcer is the first processor that can force tokens (jump-forward), nil when none.
	forcer sample.Forcer
	mask   sample.Mask
	detok  *tokenizer.Detokenizer
	stop   *sample.StopMatcher

	// premask is the mask of the token the step in flight samples on the host, computed
	// while its forward pass runs (premasks); it holds while premaskAt is the sequence's
	// length (0: none), and is dropped once the step's result is taken.
	premask   sample.Mask
	premaskAt int

	// beam is the sequence's state as a beam of a beam search (nil otherwise).
	beam *beamState

	// poolSum is the sum of the hidden states of its first poolCount prompt positions (a
	// mean-pooling engine's sequence).
	poolSum   []float64
	poolCount int
}

// slots is the number of running slots (max-num-seqs) the sequence accounts for.
func (s *sequence) slots() int {
	if s.forkPending || s.beam != nil && s.beam.reserve {
		return s.req.n
	}
	return 1
}

// numOutput is the number of output tokens so far.
func (s *sequence) numOutput() int { return len(s.tokens) - s.numPrompt }

// length is the sequence's length as the scheduler sees it: its tokens, its draft tokens,
// and the token a step in flight is sampling for it.
func (s *sequence) length() int { return len(s.tokens) + len(s.draft) + s.pending }

// before orders sequences for scheduling: lower priority value first, then arrival, then
// choice index. The last in this order is the first preemption victim.
func (s *sequence) before(o *sequence) bool {
	if s.req.priority != o.req.priority {
		return s.req.priority < o.req.priority
	}
	if s.req.order != o.req.order {
		return s.req.order < o.req.order
	}
	return s.index < o.index
}
