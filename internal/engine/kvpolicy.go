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
// blocks src (one list per lane, layer and KV head, or one for all), read before anything
// else of the step writes the cache (src may include blocks the drop released, which the
// same step may hand out again), closed up into dst after the step's copies (dst may be
// private copies of src's shared blocks).
type compaction struct {
	src, dst []int32
	keep     [][]int
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
	var mass [][]float32
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
// blocks from d.From on are compacted over the evicted tokens of each lane and the last
// d.N go.
func (s *scheduler) evict(seq *sequence, d kvcache.Drop, cached, room int) (int, *keyShift, bool, error) {
	bs := s.kv.BlockSize()
	table := s.kv.BlockTable(seq.id)
	nb := (cached + bs - 1) / bs
	groups, fold := 1, 1
	if seq.mass != nil {
		groups, fold = len(seq.mass.lanes), seq.mass.fold
	}
	if d.From < 0 || nb > len(table) || nb-d.N < d.From || len(d.Evict) != 1 && len(d.Evict) != groups {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: evicts %d lanes' tokens from block %d of a cache of %d tokens in %d blocks (%d lanes)", seq.id, len(d.Evict), d.From, cached, len(table), groups)
	}
	for h, ev := range d.Evict {
		if len(ev) != d.N*bs || ev[0] < d.From*bs || ev[len(ev)-1] >= cached || !ascending(ev) {
			return 0, nil, false, fmt.Errorf("engine: kv policy of %q: lane %d evicts %d tokens (want %d distinct, ascending) from block %d of a cache of %d tokens", seq.id, h, len(ev), d.N*bs, d.From, cached)
		}
	}
	src := slices.Clone(table[d.From:nb])
	// The blocks that keep tokens are rewritten in place: they must be ours.
	if ok, err := s.kv.PrivatizeRange(seq.id, d.From, nb-d.N); err != nil || !ok {
		return 0, nil, false, err
	}
	if err := s.kv.Drop(seq.id, nb-d.N, d.N); err != nil {
		return 0, nil, false, fmt.Errorf("engine: kv policy of %q: %w", seq.id, err)
	}
	// What each list keeps, then a list per layer and KV head when the lists are per
	// lane of mass that folds several (selection by layer).
	keep := make([][]int, len(d.Evict))
	for h, ev := range d.Evict {
		keep[h] = make([]int, 0, cached-d.From*bs-len(ev))
		for j, e := d.From*bs, 0; j < cached; j++ {
			if e < len(ev) && ev[e] == j {
				e++
				continue
			}
			keep[h] = append(keep[h], j-d.From*bs)
		}
	}
	keep = perHead(keep, fold)
	seq.dropped += d.N * bs
	if seq.mass != nil {
		seq.mass.evict(d.Evict)
	}
	c := &compaction{src: src, dst: slices.Clone(s.kv.BlockTable(seq.id)[d.From : nb-d.N]), keep: keep}
	return room, &keyShift{compact: c}, true, nil
}

// perHead returns keep, lists per lane of mass that each fold fold rows of the model's
// mass (layer after layer, KV head after KV head), as one list per row: lane g's for rows
// g·fold .. g·fold+fold-1. One list (for every row) stays as it is.
func perHead(keep [][]int, fold int) [][]int {
	if len(keep) == 1 || fold == 1 {
		return keep
	}
	out := make([][]int, len(keep)*fold)
	for h := range out {
		out[h] = keep[h/fold]
	}
	return out
}

// ascending reports whether x rises strictly.
func ascending(x []int) bool {
	for i := 1; i < len(x); i++ {
		if x[i] <= x[i-1] {
			return false
		}
	}
	return true
}

// massShape is the shape of the attention mass a model reports: lanes rows per sequence
// (model.Seq.Mass), one per layer and KV head, heads of them per layer.
type massShape struct{ lanes, heads int }

// massState is the attention mass a sequence's policy ranks its cache by (see
// kvcache.Policy.MassWindow), per lane of its selection (kvcache.PolicySpec.Selection):
// one lane for the sequence, one per layer or one per layer and KV head, each folding
// fold rows of model.Seq.Mass. Each lane holds rows of mass by its cache index, each
// from the queries of one step, the oldest rows let go once the rest cover the policy's
// window (all kept, summed, when the window is 0: H2O's accumulated mass).
type massState struct {
	window int
	fold   int
	lanes  []laneMass
}

// laneMass is one lane's mass.
type laneMass struct {
	rows []massRow
	// seen counts, for h2o, the queries whose mass went to each entry since it entered
	// the cache: its score is its mean attention.
	seen []float32
}

// massRow is the mass of one step's queries.
type massRow struct {
	queries int
	mass    []float32
}

// newMassState returns the mass state of a sequence under pol over mass of shape sh (nil
// when pol asks for none).
func newMassState(pol kvcache.Policy, sh massShape) *massState {
	asks, window := pol.MassWindow()
	if !asks {
		return nil
	}
	lanes := max(1, sh.lanes)
	groups := 1
	switch pol.Spec().Selection {
	case kvcache.SelectHead:
		groups = lanes
	case kvcache.SelectLayer:
		if sh.heads > 0 && lanes%sh.heads == 0 {
			groups = lanes / sh.heads
		}
	}
	return &massState{window: window, fold: lanes / groups, lanes: make([]laneMass, groups)}
}

// clone returns a copy of m for a forked sequence.
func (m *massState) clone() *massState {
	if m == nil {
		return nil
	}
	c := &massState{window: m.window, fold: m.fold, lanes: make([]laneMass, len(m.lanes))}
	for h, l := range m.lanes {
		c.lanes[h].seen = slices.Clone(l.seen)
		for _, r := range l.rows {
			c.lanes[h].rows = append(c.lanes[h].rows, massRow{r.queries, slices.Clone(r.mass)})
		}
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

// size returns the entries of a step's mass over a context of ctx entries: a row per
// layer and KV head.
func (m *massState) size(ctx int) int { return len(m.lanes) * m.fold * ctx }

// add takes a step's mass from its queries, as size says, each lane's rows summed.
func (m *massState) add(mass []float32, queries int) {
	n := len(mass) / (len(m.lanes) * m.fold)
	for h := range m.lanes {
		rows := mass[h*m.fold*n : (h+1)*m.fold*n : (h+1)*m.fold*n]
		sum := rows[:n:n]
		if m.fold > 1 {
			sum = slices.Clone(sum)
			for r := 1; r < m.fold; r++ {
				for j, x := range rows[r*n : (r+1)*n] {
					sum[j] += x
				}
			}
		}
		m.lanes[h].add(sum, queries, m.window)
	}
}

func (l *laneMass) add(mass []float32, queries, window int) {
	if window == 0 {
		if len(l.seen) < len(mass) {
			l.seen = append(l.seen, make([]float32, len(mass)-len(l.seen))...)
		}
		// The step's last query attends to every entry, the one before to all but the
		// last, and so on.
		for j := range mass {
			l.seen[j] += float32(min(queries, len(mass)-j))
		}
	}
	if window == 0 && len(l.rows) == 1 {
		r := &l.rows[0]
		if len(r.mass) < len(mass) {
			r.mass = append(r.mass, make([]float32, len(mass)-len(r.mass))...)
		}
		for j, x := range mass {
			r.mass[j] += x
		}
		r.queries += queries
		return
	}
	l.rows = append(l.rows, massRow{queries, mass})
	for window > 0 && len(l.rows) > 1 && l.queries()-l.rows[0].queries >= window {
		l.rows = l.rows[1:]
	}
}

func (l *laneMass) queries() int {
	n := 0
	for _, r := range l.rows {
		n += r.queries
	}
	return n
}

// score returns, per lane, the score of each of the cache's cached entries: its mass over
// the window's queries, or for h2o its mean mass over the queries since it entered.
func (m *massState) score(cached int) [][]float32 {
	out := make([][]float32, len(m.lanes))
	for h, l := range m.lanes {
		s := make([]float32, cached)
		for _, r := range l.rows {
			for j, x := range r.mass[:min(len(r.mass), cached)] {
				s[j] += x
			}
		}
		for j, n := range l.seen[:min(len(l.seen), cached)] {
			if n > 0 {
				s[j] /= n
			}
		}
		out[h] = s
	}
	return out
}

// drop forgets the mass of cache entries [from, to) of every lane, which the policy
// dropped.
func (m *massState) drop(from, to int) {
	del := func(x []float32) []float32 {
		if from < len(x) {
			return slices.Delete(x, from, min(to, len(x)))
		}
		return x
	}
	for h := range m.lanes {
		l := &m.lanes[h]
		for i := range l.rows {
			l.rows[i].mass = del(l.rows[i].mass)
		}
		l.seen = del(l.seen)
	}
}

// evict forgets the mass of the cache entries evict[h] (ascending) of each lane h (evict[0]
// of every lane when it holds one list), which the policy evicted.
func (m *massState) evict(evict [][]int) {
	for h := range m.lanes {
		ev := evict[0]
		if len(evict) > 1 {
			ev = evict[h]
		}
		gone := func(x []float32) []float32 {
			out, e := x[:0], 0
			for j, v := range x {
				if e < len(ev) && ev[e] == j {
					e++
					continue
				}
				out = append(out, v)
			}
			return out
		}
		l := &m.lanes[h]
		for i := range l.rows {
			l.rows[i].mass = gone(l.rows[i].mass)
		}
		l.seen = gone(l.seen)
	}
}
