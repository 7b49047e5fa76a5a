package kvcache

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file holds KV policies: what a sequence keeps in its blocks when its KV must stay
// within a token budget however long it grows.
//
// A policy is consulted once per step of a sequence, before the step's blocks are
// allocated (Policy.Plan): it names the logical blocks to drop and how many new tokens the
// step may add. The Manager drops them (Drop); the engine keeps, per sequence, how many
// tokens were dropped, so that a token's index in the cache (its slot, and what attends to
// it) is its index in the sequence less the tokens dropped before it.
//
// # Positions
//
// kvasir stores keys after RoPE (the backend's RopeKVWrite rotates them as it writes
// them). A policy that drops tokens rotates every token by its index in the cache, as
// StreamingLLM does: after a drop, the blocks behind the dropped ones hold keys
// rotated for places they no longer have, so they are rotated back by the tokens dropped
// (RoPE rotations compose, R(a)R(b) = R(a+b), so one rotation by -d moves a key from
// position p to p-d). Positions then never exceed the budget, and generation goes on past
// the model's context length. Each key is rotated at most once per block of the window
// it moves through, so rounding does not pile up without bound.

// PolicySpec names a KV policy and its settings: the --kv-policy flag and a request's
// kv_policy field. A setting of -1 is unset: it takes the server's value (see Over) or the
// policy's default.
type PolicySpec struct {
	// Name is the policy: "full" (keep everything; the default), "streaming", "h2o" or
	// "snapkv".
	Name string
	// BudgetTokens caps the tokens a sequence holds (enforced in whole blocks: at most
	// BudgetTokens/BlockSize blocks).
	BudgetTokens int
	// SinkTokens are the first tokens kept for good (the attention sinks); their blocks,
	// ceil(SinkTokens/BlockSize), are never dropped.
	SinkTokens int
	// WindowTokens is the recent window kept; for streaming the window is what the budget
	// leaves after the sinks, and WindowTokens, when set, must fit beside them. For h2o
	// the recent tokens never dropped (default: half of what the budget leaves beside the
	// sinks and two blocks); for snapkv the observation window too, the latest queries
	// whose attention ranks the rest (default 32, less when the budget is small).
	WindowTokens int
	// Selection is how finely h2o and snapkv choose what stays: "sequence" (the default:
	// one choice for every layer and KV head, by their summed attention mass), "layer"
	// (one per layer, by the mass of its KV heads) or "head" (one per layer and KV head,
	// as SnapKV selects per head and H2O per head and layer). "" is unset.
	Selection string
}

// Unset is the value of a PolicySpec setting that was not given.
const Unset = -1

// Policy names.
const (
	PolicyFull      = "full"
	PolicyStreaming = "streaming"
	PolicyH2O       = "h2o"
	PolicySnapKV    = "snapkv"
)

// Selections of h2o and snapkv (PolicySpec.Selection).
const (
	SelectSequence = "sequence"
	SelectLayer    = "layer"
	SelectHead     = "head"
)

// Streaming defaults.
const (
	DefaultSinkTokens   = 4
	DefaultBudgetTokens = 1024
	// DefaultObservationTokens is snapkv's default window: its observation window.
	DefaultObservationTokens = 32
)

// FullSpec is the default policy: keep every token.
func FullSpec() PolicySpec {
	return PolicySpec{Name: PolicyFull, BudgetTokens: Unset, SinkTokens: Unset, WindowTokens: Unset}
}

// ParsePolicySpec parses NAME[:key=value,...], the form of the --kv-policy flag, with keys
// budget_tokens, sink_tokens and window_tokens taking non-negative integers and selection
// taking sequence, layer or head.
func ParsePolicySpec(s string) (PolicySpec, error) {
	spec := FullSpec()
	name, rest, hasKeys := strings.Cut(strings.TrimSpace(s), ":")
	spec.Name = strings.TrimSpace(name)
	if spec.Name == "" {
		return spec, fmt.Errorf("kv policy %q: no policy name", s)
	}
	if !hasKeys {
		return spec, nil
	}
	for _, kv := range strings.Split(rest, ",") {
		key, val, ok := strings.Cut(kv, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" {
			return spec, fmt.Errorf("kv policy %q: %q is not key=value", s, kv)
		}
		if key == "selection" {
			spec.Selection = val
			if err := checkSelection(val); err != nil {
				return spec, fmt.Errorf("kv policy %q: %w", s, err)
			}
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return spec, fmt.Errorf("kv policy %q: %s=%q is not a non-negative integer", s, key, val)
		}
		switch key {
		case "budget_tokens":
			spec.BudgetTokens = n
		case "sink_tokens":
			spec.SinkTokens = n
		case "window_tokens":
			spec.WindowTokens = n
		default:
			return spec, fmt.Errorf("kv policy %q: unknown key %q (have budget_tokens, sink_tokens, window_tokens, selection)", s, key)
		}
	}
	return spec, nil
}

// checkSelection says what is wrong with a selection ("" is unset).
func checkSelection(sel string) error {
	switch sel {
	case "", SelectSequence, SelectLayer, SelectHead:
		return nil
	}
	return fmt.Errorf("selection %q is not sequence, layer or head", sel)
}

// String formats s as ParsePolicySpec reads it.
func (s PolicySpec) String() string {
	var keys []string
	for _, kv := range []struct {
		k string
		v int
	}{{"budget_tokens", s.BudgetTokens}, {"sink_tokens", s.SinkTokens}, {"window_tokens", s.WindowTokens}} {
		if kv.v != Unset {
			keys = append(keys, kv.k+"="+strconv.Itoa(kv.v))
		}
	}
	if s.Selection != "" {
		keys = append(keys, "selection="+s.Selection)
	}
	if len(keys) == 0 {
		return s.Name
	}
	return s.Name + ":" + strings.Join(keys, ",")
}

// Over returns s with its unset parts taken from base (a request's policy over the
// server's): an empty name takes base's name, and unset settings take base's when the
// names agree.
func (s PolicySpec) Over(base PolicySpec) PolicySpec {
	if s.Name == "" {
		s.Name = base.Name
	}
	if s.Name != base.Name {
		return s
	}
	if s.BudgetTokens == Unset {
		s.BudgetTokens = base.BudgetTokens
	}
	if s.SinkTokens == Unset {
		s.SinkTokens = base.SinkTokens
	}
	if s.WindowTokens == Unset {
		s.WindowTokens = base.WindowTokens
	}
	if s.Selection == "" {
		s.Selection = base.Selection
	}
	return s
}

// Policy decides what a sequence keeps in its blocks. It is immutable and may be shared
// by the sequences of a request.
type Policy interface {
	// Spec returns the settings the policy runs with, defaults filled in.
	Spec() PolicySpec
	// Drops reports whether the policy ever drops tokens. A sequence under such a policy
	// rotates its tokens by their index in the cache (see the file comment), does not
	// publish blocks to the prefix cache (its blocks stop matching the hash chain of its
	// tokens) and does not draft.
	Drops() bool
	// MassWindow says whether the policy ranks the cache by attention mass (see
	// model.Seq.Mass), and over which queries: window 0 all of them since the sequence
	// began (accumulated, H2O), window w > 0 the latest w (SnapKV's observation window).
	MassWindow() (asks bool, window int)
	// Plan is asked before a step that would add want >= 1 tokens to a sequence whose
	// cache holds cached tokens, with mass, when the policy asks for it (MassWindow; nil
	// otherwise), the attention mass of each cache entry per lane of its selection (one
	// row for the sequence, one per layer or one per layer and KV head, see
	// PolicySpec.Selection; each lane's entries the tokens that lane kept): it returns
	// what to drop first (a zero Drop: nothing) and how many of the want tokens the step
	// may add, at least 1.
	Plan(cached, want int, mass [][]float32) (d Drop, room int)
}

// Drop is what a policy drops before a step: N blocks' worth of tokens.
type Drop struct {
	// From and N: without Evict, the logical blocks [From, From+N) go whole.
	From, N int
	// Evict, when set, makes the drop token-granular: it holds, for each lane of the mass
	// Plan was given (one list for them all when it was given one lane), the N x BlockSize
	// cache indices that go from that lane, ascending, none below From x BlockSize. In
	// each lane the entries after each move down to close the gaps (their keys rotated by
	// the places they move, as a block drop rotates the blocks behind it), and the
	// sequence's last N blocks, emptied so in every lane, go.
	Evict [][]int
}

// NewPolicy checks spec and returns its policy for blocks of blockSize tokens.
func NewPolicy(spec PolicySpec, blockSize int) (Policy, error) {
	switch spec.Name {
	case PolicyFull, "":
		if spec.BudgetTokens != Unset || spec.SinkTokens != Unset || spec.WindowTokens != Unset || spec.Selection != "" {
			return nil, fmt.Errorf("kv policy full keeps every token: it takes no budget_tokens, sink_tokens, window_tokens or selection")
		}
		return fullPolicy{}, nil
	case PolicyStreaming:
		return newStreaming(spec, blockSize)
	case PolicyH2O, PolicySnapKV:
		return newHeavyHitters(spec, blockSize)
	}
	return nil, fmt.Errorf("unknown kv policy %q (have full, streaming, h2o, snapkv)", spec.Name)
}

// fullPolicy keeps every token: today's paged cache.
type fullPolicy struct{}

func (fullPolicy) Spec() PolicySpec { return FullSpec() }

func (fullPolicy) Drops() bool { return false }

func (fullPolicy) MassWindow() (bool, int) { return false, 0 }

func (fullPolicy) Plan(cached, want int, mass [][]float32) (Drop, int) { return Drop{}, want }

// streaming is StreamingLLM (Xiao et al., 2023) on blocks: the sink blocks, then a window
// of the most recent blocks, the blocks between dropped whole, oldest first; tokens
// rotated by their index in the cache.
type streaming struct {
	spec       PolicySpec
	bs         int
	maxBlocks  int // budget in blocks
	sinkBlocks int
}

func newStreaming(spec PolicySpec, bs int) (Policy, error) {
	if spec.Selection != "" {
		return nil, fmt.Errorf("kv policy streaming keeps the same blocks for every head: it takes no selection (h2o and snapkv do)")
	}
	if spec.SinkTokens == Unset {
		spec.SinkTokens = DefaultSinkTokens
	}
	if spec.BudgetTokens == Unset {
		spec.BudgetTokens = DefaultBudgetTokens
		if spec.WindowTokens != Unset {
			spec.BudgetTokens = spec.SinkTokens + spec.WindowTokens
		}
	}
	if spec.WindowTokens == Unset {
		spec.WindowTokens = max(0, spec.BudgetTokens-spec.SinkTokens)
	}
	if spec.SinkTokens+spec.WindowTokens > spec.BudgetTokens {
		return nil, fmt.Errorf("kv policy streaming: budget_tokens %d is below sink_tokens %d + window_tokens %d", spec.BudgetTokens, spec.SinkTokens, spec.WindowTokens)
	}
	p := &streaming{spec: spec, bs: bs, maxBlocks: spec.BudgetTokens / bs, sinkBlocks: (spec.SinkTokens + bs - 1) / bs}
	if p.maxBlocks < p.sinkBlocks+2 {
		return nil, fmt.Errorf("kv policy streaming: budget_tokens %d holds %d blocks of %d tokens: too few for the %d sink block(s) of sink_tokens %d and a window of at least 2 blocks",
			spec.BudgetTokens, p.maxBlocks, bs, p.sinkBlocks, spec.SinkTokens)
	}
	return p, nil
}

func (p *streaming) Spec() PolicySpec { return p.spec }

func (p *streaming) Drops() bool { return true }

// Plan drops the fewest old window blocks that make room for the step's first block of
// tokens (a decode token, or up to a block of a prompt chunk), then lets the step fill
// what the budget leaves. Only full blocks are dropped, so at least maxBlocks-sinkBlocks-1
// whole blocks of the most recent tokens stay before the step's first token.
func (p *streaming) MassWindow() (bool, int) { return false, 0 }

func (p *streaming) Plan(cached, want int, mass [][]float32) (Drop, int) {
	bs := p.bs
	first := min(want, bs)
	n := 0
	if over := (cached+first+bs-1)/bs - p.maxBlocks; over > 0 {
		n = min(over, max(0, cached/bs-p.sinkBlocks))
	}
	room := min(want, p.maxBlocks*bs-(cached-n*bs))
	if n == 0 {
		return Drop{}, room
	}
	return Drop{From: p.sinkBlocks, N: n}, room
}

// heavyHitters keeps the tokens the sequence's attention goes to: the sink tokens, the
// recent window, and of the tokens between those the ones with the most attention mass.
// When the budget is full, the block's worth of tokens with the least mass goes (the
// oldest among equals) and the cache is compacted over the gaps, so that one block is
// freed while every recent token stays. The choice is made per lane of the mass the
// engine gives Plan: one lane for the whole sequence (mass summed over layers and KV
// heads), one per layer, or one per layer and KV head (PolicySpec.Selection). Every head
// keeps the same number of tokens, so the heads share the block table, but with a choice
// per layer or head slot j of one head may hold another token than slot j of the next:
// keys sit at their slot's position whichever token they are (the compaction rotates
// each moved key to its new slot), so nothing per head needs remembering. h2o (Zhang et al., 2023) ranks
// by the mass of every query since a token entered the cache, divided by the number of
// those queries: a token's mean attention, so that the oldest tokens do not win only by
// having been attended the longest (the bias of the plain sum that A2SF, Jo and Shin
// 2024, names and corrects with a decay). snapkv (Li et al., 2024) ranks by the mass of
// the latest queries only, its observation window, max-pooled over neighbouring tokens
// (SnapKV's pooling, which keeps the context around a selected token), at every drop
// rather than once at the end of the prompt, so that a sequence of any length stays
// within its budget. Tokens are rotated by their place in the cache, as streaming's are.
type heavyHitters struct {
	spec          PolicySpec
	bs, maxBlocks int
	window        int // mass window: 0 for h2o
}

// snapKVPool is the width of snapkv's max-pooling of the mass over tokens (SnapKV's
// kernel size).
const snapKVPool = 7

func newHeavyHitters(spec PolicySpec, bs int) (Policy, error) {
	if err := checkSelection(spec.Selection); err != nil {
		return nil, fmt.Errorf("kv policy %s: %w", spec.Name, err)
	}
	if spec.Selection == "" {
		spec.Selection = SelectSequence
	}
	if spec.SinkTokens == Unset {
		spec.SinkTokens = DefaultSinkTokens
	}
	if spec.BudgetTokens == Unset {
		spec.BudgetTokens = DefaultBudgetTokens
	}
	if spec.WindowTokens == Unset {
		// What the budget's full blocks leave beside the sinks and a block's worth of
		// candidates: h2o keeps half of it recent (H2O's even split of heavy hitters and
		// recent tokens), snapkv up to its observation window.
		room := max(0, (spec.BudgetTokens/bs-1)*bs-spec.SinkTokens-bs)
		spec.WindowTokens = min(DefaultObservationTokens, room)
		if spec.Name == PolicyH2O {
			spec.WindowTokens = room / 2
		}
	}
	if spec.SinkTokens+spec.WindowTokens > spec.BudgetTokens {
		return nil, fmt.Errorf("kv policy %s: budget_tokens %d is below sink_tokens %d + window_tokens %d", spec.Name, spec.BudgetTokens, spec.SinkTokens, spec.WindowTokens)
	}
	p := &heavyHitters{spec: spec, bs: bs, maxBlocks: spec.BudgetTokens / bs}
	if spec.Name == PolicySnapKV {
		p.window = max(1, spec.WindowTokens)
	}
	// A drop must find a block's worth of tokens outside the sinks and the recent window
	// among the maxBlocks-1 full blocks held when the budget is full.
	if (p.maxBlocks-1)*bs < spec.SinkTokens+spec.WindowTokens+bs {
		return nil, fmt.Errorf("kv policy %s: budget_tokens %d holds %d blocks of %d tokens: too few for sink_tokens %d, window_tokens %d and 2 more blocks",
			spec.Name, spec.BudgetTokens, p.maxBlocks, bs, spec.SinkTokens, spec.WindowTokens)
	}
	return p, nil
}

func (p *heavyHitters) Spec() PolicySpec { return p.spec }

func (p *heavyHitters) Drops() bool { return true }

func (p *heavyHitters) MassWindow() (bool, int) { return true, p.window }

// Plan evicts, when the step's first block of tokens would pass the budget, from each
// lane of mass the block's worth of tokens outside the sinks and the recent window with
// the least mass (mass already normalized as the policy ranks it, see the type's
// comment); with no mass, one lane of equal scores: the oldest tokens.
func (p *heavyHitters) Plan(cached, want int, mass [][]float32) (Drop, int) {
	bs := p.bs
	first := min(want, bs)
	var d Drop
	if (cached+first+bs-1)/bs > p.maxBlocks {
		lanes := mass
		if len(lanes) == 0 {
			lanes = [][]float32{nil}
		}
		d.Evict = make([][]int, len(lanes))
		d.From, d.N = cached/bs, 1
		for h, m := range lanes {
			d.Evict[h] = p.leastAttended(cached, m)
			d.From = min(d.From, d.Evict[h][0]/bs)
		}
	}
	return d, min(want, p.maxBlocks*bs-(cached-d.N*bs))
}

// leastAttended returns, ascending, the block's worth of cache indices outside the sinks
// and the recent window with the least score by mass (entries past mass score 0).
// Validation leaves enough candidates: cached > (maxBlocks-1) x bs.
func (p *heavyHitters) leastAttended(cached int, mass []float32) []int {
	lo, hi := p.spec.SinkTokens, cached-p.spec.WindowTokens
	score := make([]float32, hi-lo)
	for j := range score {
		if lo+j < len(mass) {
			score[j] = mass[lo+j]
		}
	}
	if p.window > 0 {
		score = maxPool(score, snapKVPool)
	}
	idx := make([]int, len(score))
	for j := range idx {
		idx[j] = j
	}
	// The least mass first, the oldest among equals.
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(score[a], score[b]) })
	evict := idx[:p.bs]
	slices.Sort(evict)
	for i := range evict {
		evict[i] += lo
	}
	return evict
}

// maxPool returns, for each x[j], the largest of x[j-w/2 .. j+w/2] that x holds.
func maxPool(x []float32, w int) []float32 {
	out := make([]float32, len(x))
	for j := range x {
		m := x[j]
		for _, v := range x[max(0, j-w/2):min(len(x), j+w/2+1)] {
			m = max(m, v)
		}
		out[j] = m
	}
	return out
}
