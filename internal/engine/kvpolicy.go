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
// pass (after its copies), or, with compact set, a compaction instead.
type keyShift struct {
	blocks  []int32
	delta   int
	compact *compaction
}

// compaction orders a token-granular drop's move (kvcache.Drop.Evict): the slots keep of
// blocks src, read before anything else of the step writes the cache (src may include
// blocks the drop released, which the same step may hand out again), closed up into dst
// after the step's copies (dst may be private copies of src's shared blocks).
type compaction struct {
	src, dst []int32
	keep     []int
	buf      []byte
}

// fitPolicy applies seq's policy before a step that would compute want tokens of it: it
// drops what the policy names and returns how many tokens the step may compute, with the
// key rotation or compaction the drop needs (nil: none). It returns ok false, having
// dropped nothing, when the pool lacks the blocks that keys shared with other sequences
// (forked choices) need to be copied to before they rotate. compacted says whether an
// earlier call for the step already ordered a compaction, whose reads a second one
// would have to follow.
func (s *scheduler) fitPolicy(seq *sequence, want int, compacted bool) (room int, shift *keyShift, ok bool, err error) {
	pol := seq.req.policy
	if !pol.Drops() {
		return want, nil, true, nil
	}
	cached := seq.numComputed - seq.dropped
	var mass []float32
	if seq.mass != nil {
		mass = seq.mass.score(cached)
	}
	d, room := pol.Plan(cached, want, mass)
	if d.N == 0 {
		return room, nil, true, nil
	}
	bs := s.kv.BlockSize()
	if d.Evict != nil {
		if compacted {
			return 0, nil, false, fmt.Errorf("engine: kv policy of %q: a second token eviction in one step", seq.id)
		}
		return s.evict(seq, d, cached, room)
	}
	from, n := d.From, d.N
	// The blocks behind the dropped ones are rewritten in place: they must be ours.
	if ok, err := s.kv.Privatize(seq.id, from+n); err != nil || !ok {
		return 0, nil, false, err
	}
	if err := s.kv.Drop(seq.id, from, n); err != nil {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: %w", seq.id, err)
	}
	seq.dropped += n * bs
	if seq.mass != nil {
		seq.mass.drop(from*bs, (from+n)*bs)
	}
	table := s.kv.BlockTable(seq.id)
	return room, &keyShift{blocks: slices.Clone(table[from:]), delta: -n * bs}, true, nil
}

// evict applies a token-granular drop d to seq, whose cache holds cached tokens: the
// blocks from d.From on are compacted over the evicted tokens and the last d.N go.
func (s *scheduler) evict(seq *sequence, d kvcache.Drop, cached, room int) (int, *keyShift, bool, error) {
	bs := s.kv.BlockSize()
	table := s.kv.BlockTable(seq.id)
	nb := (cached + bs - 1) / bs
	if len(d.Evict) != d.N*bs || d.From < 0 || d.Evict[0] < d.From*bs || d.Evict[len(d.Evict)-1] >= cached || nb > len(table) || nb-d.N < d.From {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: evicts %d tokens from block %d of a cache of %d tokens in %d blocks", seq.id, len(d.Evict), d.From, cached, len(table))
	}
	src := slices.Clone(table[d.From:nb])
	// The blocks that keep tokens are rewritten in place: they must be ours.
	if ok, err := s.kv.PrivatizeRange(seq.id, d.From, nb-d.N); err != nil || !ok {
		return 0, nil, false, err
	}
	if err := s.kv.Drop(seq.id, nb-d.N, d.N); err != nil {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: %w", seq.id, err)
	}
	keep := make([]int, 0, cached-d.From*bs-len(d.Evict))
	for j, e := d.From*bs, 0; j < cached; j++ {
		if e < len(d.Evict) && d.Evict[e] == j {
			e++
			continue
		}
		keep = append(keep, j-d.From*bs)
	}
	seq.dropped += d.N * bs
	if seq.mass != nil {
		seq.mass.evict(d.Evict)
	}
	c := &compaction{src: src, dst: slices.Clone(s.kv.BlockTable(seq.id)[d.From : nb-d.N]), keep: keep}
	return room, &keyShift{compact: c}, true, nil
}

// massState is the attention mass a sequence's policy ranks its cache by (see
// kvcache.Policy.MassWindow): rows of mass by cache index, each from the queries of one
// step, the oldest rows let go once the rest cover the policy's window (all kept when the
// window is 0: H2O's accumulated mass).
type massState struct {
	window int
	rows   []massRow
	// seen counts, for h2o, the queries whose mass went to each entry since it entered
	// the cache: its score is its mean attention.
	seen []float32
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
	c := &massState{window: m.window, seen: slices.Clone(m.seen)}
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
	if m.window == 0 {
		if len(m.seen) < len(mass) {
			m.seen = append(m.seen, make([]float32, len(mass)-len(m.seen))...)
		}
		// The step's last query attends to every entry, the one before to all but the
		// last, and so on.
		for j := range mass {
			m.seen[j] += float32(min(queries, len(mass)-j))
		}
	}
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

// score returns the score of each of the cache's cached entries: its mass over the
// window's queries, or for h2o its mean mass over the queries since it entered.
func (m *massState) score(cached int) []float32 {
	s := make([]float32, cached)
	for _, r := range m.rows {
		for j, x := range r.mass[:min(len(r.mass), cached)] {
			s[j] += x
		}
	}
	for j, n := range m.seen[:min(len(m.seen), cached)] {
		if n > 0 {
			s[j] /= n
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
	if from < len(m.seen) {
		m.seen = slices.Delete(m.seen, from, min(to, len(m.seen)))
	}
}

// evict forgets the mass of the cache entries evict (ascending), which the policy evicted.
func (m *massState) evict(evict []int) {
	gone := func(x []float32) []float32 {
		out, e := x[:0], 0
		for j, v := range x {
			if e < len(evict) && evict[e] == j {
				e++
				continue
			}
			out = append(out, v)
		}
		return out
	}
	for i := range m.rows {
		m.rows[i].mass = gone(m.rows[i].mass)
	}
	m.seen = gone(m.seen)
}
