package engine

import (
	"fmt"
	"slices"
)

// This file applies a sequence's KV policy (kvcache.Policy) to its steps: before a step
// is allocated the policy names the blocks to drop and caps the step's tokens; the step
// then computes its tokens at their cache indices (sequence index less the tokens
// dropped), and, under a policy with cache positions, first rotates the keys behind the
// dropped blocks to their new places.

// keyShift orders the keys of blocks rotated by delta positions before a step's forward
// pass (after its copies).
type keyShift struct {
	blocks []int32
	delta  int
}

// fitPolicy applies seq's policy before a step that would compute want tokens of it: it
// drops the blocks the policy names and returns how many tokens the step may compute,
// with the key rotation the drop needs (nil: none). It returns ok false, having dropped
// nothing, when the pool lacks the blocks that keys shared with other sequences (forked
// choices) need to be copied to before they rotate.
func (s *scheduler) fitPolicy(seq *sequence, want int) (room int, shift *keyShift, ok bool, err error) {
	pol := seq.req.policy
	if !pol.Drops() || !s.kv.HasRequest(seq.id) {
		// A sequence not admitted yet holds nothing to drop.
		_, _, room = pol.Plan(0, want)
		return room, nil, true, nil
	}
	cached := seq.numComputed - seq.dropped
	from, n, room := pol.Plan(cached, want)
	if n == 0 {
		return room, nil, true, nil
	}
	if pol.CachePositions() {
		// The blocks behind the dropped ones are rewritten in place: they must be ours.
		if ok, err := s.kv.Privatize(seq.id, from+n); err != nil || !ok {
			return 0, nil, false, err
		}
	}
	if err := s.kv.Drop(seq.id, from, n); err != nil {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: %w", seq.id, err)
	}
	seq.dropped += n * s.kv.BlockSize()
	if !pol.CachePositions() {
		return room, nil, true, nil
	}
	table := s.kv.BlockTable(seq.id)
	return room, &keyShift{blocks: slices.Clone(table[from:]), delta: -n * s.kv.BlockSize()}, true, nil
}

// cacheIndex returns the cache index and the RoPE position of seq's token p in a step
// scheduled with dropped tokens dropped.
func cacheIndex(seq *sequence, p, dropped int) (index, pos int) {
	index = p - dropped
	if seq.req.policy.CachePositions() {
		return index, index
	}
	return index, p
}
