package structured

import (
	"slices"
	"sync"
)

// refine computes Moore's partition refinement of d's states, incrementally: it starts from
// the blocks {dead}, {accepting}, {the other live states} and, in each round, splits every
// block whose states move to different blocks on some byte class, so that after round i two
// states share a block exactly when no input of at most i bytes tells them apart (the same
// inputs keep them alive and the same ones end in an accepting state). It runs at most
// rounds rounds (rounds < 0: until no block splits, which is minimization).
//
// Moore's rounds recompute every state's signature, so a chain of n counting states (a
// counted repetition, which splits one state off the chain a round) costs n rounds of n
// states. Here a round looks only at the predecessors of the states that changed block in
// the round before: the others keep their signature, and within a block they all share the
// signature of the block before the split. The result is the same partition as Moore's.
//
// It returns each state's block, the number of blocks and the number of rounds after which
// no block split any more (-1 when it stopped at rounds before that), or nil when the work
// (signatures computed, times the byte classes) would pass maxWork; callers then go without
// the refinement, which only saves memory and time and never changes a language.
func refine(d *dfa, rounds, maxWork int) ([]uint32, int, int) {
	n, nc := d.numStates(), d.nclass
	block := make([]uint32, n)
	// the blocks as doubly linked lists of their states
	head := make([]int32, 0, 3)
	size := make([]int32, 0, 3)
	sc := refinePool.Get().(*refineScratch)
	defer refinePool.Put(sc)
	next := sc.int32s(&sc.next, n)
	prev := sc.int32s(&sc.prev, n)
	link := func(q int, b uint32) {
		block[q] = b
		next[q], prev[q] = head[b], -1
		if head[b] >= 0 {
			prev[head[b]] = int32(q)
		}
		head[b] = int32(q)
		size[b]++
	}
	unlink := func(q int) {
		b := block[q]
		if prev[q] >= 0 {
			next[prev[q]] = next[q]
		} else {
			head[b] = next[q]
		}
		if next[q] >= 0 {
			prev[next[q]] = prev[q]
		}
		size[b]--
	}
	initial := [3]int32{-1, -1, -1} // dead, accepting, other: their block ids
	for q := range n {
		kind := 2
		switch {
		case q == 0:
			kind = 0
		case d.accept[q]:
			kind = 1
		}
		if initial[kind] < 0 {
			initial[kind] = int32(len(head))
			head = append(head, -1)
			size = append(size, 0)
		}
		link(q, uint32(initial[kind]))
	}

	// each state's moves to live states, as (class, target) lists (CSR form): a move to the
	// dead state is one to its block, which holds only it (a live state is never alike to
	// it), so the lists tell states apart as the full rows do, and most rows are mostly
	// dead (a key's or an enum value's characters have one move each of some 20-50 classes)
	off := sc.int32s(&sc.off, n+1)
	for q := range n {
		live := int32(0)
		for _, t := range d.next[q*nc : (q+1)*nc] {
			if t != 0 {
				live++
			}
		}
		off[q+1] = off[q] + live
	}
	moveClass := grown(&sc.moveClass, int(off[n]))
	moveTo := grown(&sc.moveTo, int(off[n]))
	// preds lists, for each state, the live states with a move into it (CSR form); moves
	// into the dead state are left out, since it never changes block.
	start := sc.int32s(&sc.start, n+1)
	for q := range n {
		i := off[q]
		for c, t := range d.next[q*nc : (q+1)*nc] {
			if t != 0 {
				moveClass[i], moveTo[i] = uint8(c), t
				i++
				start[t+1]++
			}
		}
	}
	for q := range n {
		start[q+1] += start[q]
	}
	preds := grown(&sc.preds, int(start[n]))
	fill := grown(&sc.fill, n)
	copy(fill, start[:n])
	for q := range n {
		for _, t := range moveTo[off[q]:off[q+1]] {
			preds[fill[t]] = int32(q)
			fill[t]++
		}
	}

	sig := func(q int) uint64 {
		h := uint64(0x9e3779b97f4a7c15)
		for i := off[q]; i < off[q+1]; i++ {
			h = (h ^ (uint64(moveClass[i])<<32 | uint64(block[moveTo[i]]))) * 0x100000001b3
		}
		return h
	}
	same := func(q, r int) bool {
		a, b := off[q], off[r]
		if off[q+1]-a != off[r+1]-b {
			return false
		}
		for i := range off[q+1] - a {
			if moveClass[a+i] != moveClass[b+i] || block[moveTo[a+i]] != block[moveTo[b+i]] {
				return false
			}
		}
		return true
	}

	stamp := sc.uint32s(&sc.stamp, n) // round+1 when a state is a candidate of the round
	cands := grown(&sc.cands, n)[:0]
	keys := grown(&sc.keys, n)[:0]
	for q := range n {
		cands = append(cands, q)
	}
	type move struct {
		q  int
		to uint32
	}
	var moves []move
	type group struct {
		rep int    // its first state
		h   uint64 // its signature's hash
		to  uint32 // the block it goes to
	}
	var groups []group
	work := 0
	for round := 0; rounds < 0 || round < rounds; round++ {
		mark := uint32(round + 1)
		for _, q := range cands {
			stamp[q] = mark
		}
		// group the candidates by block: sorting packed (block, state) keys is several times
		// faster than sorting states with a comparison function
		keys = keys[:0]
		for _, q := range cands {
			keys = append(keys, uint64(block[q])<<32|uint64(q))
		}
		slices.Sort(keys)
		for i, k := range keys {
			cands[i] = int(uint32(k))
		}
		moves = moves[:0]
		for i := 0; i < len(cands); {
			b := block[cands[i]]
			j := i + 1
			for j < len(cands) && block[cands[j]] == b {
				j++
			}
			qs := cands[i:j]
			i = j
			if size[b] == 1 {
				continue
			}
			work += (len(qs) + 1) * nc
			if maxWork >= 0 && work > maxWork {
				return nil, 0, -1
			}
			// a state of the block that is not a candidate has the signature the whole
			// block had: its group keeps the block's id (else the first group does)
			groups = groups[:0]
			if int(size[b]) > len(qs) {
				r := int(head[b])
				for stamp[r] == mark {
					r = int(next[r])
				}
				groups = append(groups, group{rep: r, h: sig(r), to: b})
			}
			for _, q := range qs {
				h := sig(q)
				g := -1
				for k := range groups {
					if groups[k].h == h && same(q, groups[k].rep) {
						g = k
						break
					}
				}
				if g < 0 {
					to := b
					if len(groups) > 0 {
						to = uint32(len(head))
						head = append(head, -1)
						size = append(size, 0)
					}
					groups = append(groups, group{rep: q, h: h, to: to})
					g = len(groups) - 1
				}
				if groups[g].to != b {
					moves = append(moves, move{q, groups[g].to})
				}
			}
		}
		if len(moves) == 0 {
			return block, len(head), round // stable: no longer input tells more states apart
		}
		// apply the round's splits together, so that every signature of the round was
		// taken over the blocks of the round before
		cands = cands[:0]
		for _, m := range moves {
			unlink(m.q)
			link(m.q, m.to)
		}
		for _, m := range moves {
			for _, p := range preds[start[m.q]:start[m.q+1]] {
				if stamp[p] != mark+1 {
					stamp[p] = mark + 1
					cands = append(cands, int(p))
				}
			}
		}
	}
	return block, len(head), -1
}

// refineScratch holds refine's working tables between calls (a compile refines hundreds
// of automata; allocating them anew each time was a tenth of a compile's garbage).
type refineScratch struct {
	next, prev, off, start, preds, fill []int32
	stamp, moveTo                       []uint32
	moveClass                           []uint8
	cands                               []int
	keys                                []uint64
}

var refinePool = sync.Pool{New: func() any { return new(refineScratch) }}

// grown returns (*buf)[:n], reallocated when too small; its contents are not cleared.
func grown[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

func (sc *refineScratch) int32s(buf *[]int32, n int) []int32 {
	s := grown(buf, n)
	clear(s)
	return s
}

func (sc *refineScratch) uint32s(buf *[]uint32, n int) []uint32 {
	s := grown(buf, n)
	clear(s)
	return s
}
