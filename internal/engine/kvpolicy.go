package engine

import (
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// This file applies a sequence's KV policy (kvcache.Policy) to its steps: before a step
// is allocated the policy names the blocks to drop and caps the step's tokens; the step
// then computes its tokens at their cache indices (sequence index less the tokens
// dropped), which are also their RoPE positions, and first rotates the keys behind the
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
	if !pol.Drops() {
		return want, nil, true, nil
	}
	cached := seq.numComputed - seq.dropped
	var mass []float32
	if seq.mass != nil {
		mass = seq.mass.score(cached)
	}
	from, n, room := pol.Plan(cached, want, mass)
	if n == 0 {
		return room, nil, true, nil
	}
	// The blocks behind the dropped ones are rewritten in place: they must be ours.
	if ok, err := s.kv.Privatize(seq.id, from+n); err != nil || !ok {
		return 0, nil, false, err
	}
	if err := s.kv.Drop(seq.id, from, n); err != nil {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: %w", seq.id, err)
	}
	seq.dropped += n * s.kv.BlockSize()
	if seq.mass != nil {
		seq.mass.drop(from*s.kv.BlockSize(), (from+n)*s.kv.BlockSize())
	}
	table := s.kv.BlockTable(seq.id)
	return room, &keyShift{blocks: slices.Clone(table[from:]), delta: -n * s.kv.BlockSize()}, true, nil
}

// massState is the attention mass a sequence's policy ranks its cache by (see
// kvcache.Policy.MassWindow): rows of mass by cache index, each from the queries of one
// step, the oldest rows let go once the rest cover the policy's window (all kept when the
// window is 0: H2O's accumulated mass).
type massState struct {
	window int
	rows   []massRow
}

// massRow is the mass of one step's queries.
type massRow struct {
	queries int
	mass    []float32
}

// newMassState returns the mass state of a sequence under pol (nil when pol asks for none).
func newMassState(pol kvcache.Policy) *massState {
	if asks, window := pol.MassWindow(); asks {
		return &massState{window: window}
	}
	return nil
}

// clone returns a copy of m for a forked sequence.
func (m *massState) clone() *massState {
	if m == nil {
		return nil
	}
	c := &massState{window: m.window}
	for _, r := range m.rows {
		c.rows = append(c.rows, massRow{r.queries, slices.Clone(r.mass)})
	}
	return c
}

// from returns the first of a step's numNew tokens whose queries count.
func (m *massState) from(numNew int) int {
	if m.window == 0 {
		return 0
	}
	return max(0, numNew-m.window)
}

// add takes a step's mass from its queries.
func (m *massState) add(mass []float32, queries int) {
	if m.window == 0 && len(m.rows) == 1 {
		r := &m.rows[0]
		if len(r.mass) < len(mass) {
			r.mass = append(r.mass, make([]float32, len(mass)-len(r.mass))...)
		}
		for j, x := range mass {
			r.mass[j] += x
		}
		r.queries += queries
		return
	}
	m.rows = append(m.rows, massRow{queries, mass})
	for m.window > 0 && len(m.rows) > 1 && m.queries()-m.rows[0].queries >= m.window {
		m.rows = m.rows[1:]
	}
}

func (m *massState) queries() int {
	n := 0
	for _, r := range m.rows {
		n += r.queries
	}
	return n
}

// score returns the mass of each of the cache's cached entries.
func (m *massState) score(cached int) []float32 {
	s := make([]float32, cached)
	for _, r := range m.rows {
		for j, x := range r.mass[:min(len(r.mass), cached)] {
			s[j] += x
		}
	}
	return s
}

// drop forgets the mass of cache entries [from, to), which the policy dropped.
func (m *massState) drop(from, to int) {
	for i := range m.rows {
		r := &m.rows[i]
		if from < len(r.mass) {
			r.mass = slices.Delete(r.mass, from, min(to, len(r.mass)))
		}
	}
}
