package structured

import (
	"slices"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Reference languages let a lexeme walk take whole subtrees of the trie where no state of
// the lexeme's DFA loops on their bytes: inside a JSON string whose tokens mix ASCII and
// multi-byte UTF-8 (no single state loops on both a lead byte and a continuation byte),
// inside counted repetitions, whose states never loop, and inside key patterns of ASCII
// characters, whose subtrees hold tokens of other bytes.
//
// Each reference is a fixed regular language R* (R a character class: JSON string
// characters; the same in ASCII; letters and digits). The trie records, per reference and
// node whose path stays inside R* from the start: the depth of the deepest such node of its
// subtree, the bytes on which paths of its subtree first leave R* (its exits), and the
// tokens of such nodes, as a mask per depth. A lexeme's walk from DFA state q first finds,
// per reference, the largest h such that every input of at most h bytes inside R* keeps
// q's DFA alive and never accepting, whether every such input of h+1 bytes kills it, and
// the exit bytes on which it survives from a state those inputs reach (simulationDepth).
// At a node inside R* whose exits are none of those and whose part inside R* is at most h
// deep (or goes deeper, where every longer input dies), every node of the subtree is
// either inside R* and at most h deep, so allowed with no lexeme end, or dead: the subtree
// is taken whole, its tokens from the trie's mask of depth h. For an unbounded string h is
// unbounded; for [^"]{0,40} in a string h is 40.

// referenceClasses are the character classes of the reference languages (at most 8).
var referenceClasses = [][]runeRange{
	// JSON string characters: printable ASCII but the quote and the backslash, and every
	// code point above ASCII (DEL left out: not every string class admits it)
	{{0x20, 0x21}, {0x23, 0x5b}, {0x5d, 0x7e}, {0x80, 0x10ffff}},
	// the same in ASCII only (the strings of keys and patterns limited to ASCII)
	{{0x20, 0x21}, {0x23, 0x5b}, {0x5d, 0x7e}},
	// letters and digits (identifiers, the parts of an email address or a host name)
	{{'0', '9'}, {'A', 'Z'}, {'a', 'z'}},
}

// referenceDFAs returns the DFAs of the reference languages, built once.
var referenceDFAs = sync.OnceValue(func() []*dfa {
	out := make([]*dfa, len(referenceClasses))
	for i, rs := range referenceClasses {
		d, err := compileDFA(repeatNode(classNode(rs), 0, -1), 1<<16, 1<<16, func() error { return nil })
		if err != nil {
			panic("structured: reference automaton: " + err.Error()) // fixed input: cannot happen
		}
		out[i] = d
	}
	return out
})

// refNodes is what the trie keeps for one reference language (see the top of this file).
type refNodes struct {
	// node[i] packs the depth of the deepest node of i's subtree whose path stays inside
	// the reference (0 when node i's own path leaves it) in its high 16 bits, and in its
	// low 16 bits the index in exitSets of the bytes on which paths of i's subtree first
	// leave the reference (maxExitSets when there are more sets than that).
	node     []uint32
	exitSets []byteSet
	// masks[k] holds the tokens of the nodes inside the reference at most k deep.
	masks []sample.Mask
}

// maxExitSets is the most exit sets a reference keeps (a walk checks them as bits of one
// word); nodes with other exits are never taken whole by it.
const maxExitSets = 64

// setReferences computes refs: per reference about 6 bytes a node and (the longest token
// + 1) masks of the vocabulary's size (about 2 MiB for Llama 3), built with the trie so
// that no mask pays for them.
func (t *TokenTrie) setReferences() {
	n := len(t.label)
	state := make([]uint32, t.maxDepth+1)
	exits := make([]byteSet, n)
	for _, ref := range referenceDFAs() {
		rn := refNodes{node: make([]uint32, n)}
		depth := make([]uint16, n)
		inside := make([]bool, n)
		inside[0] = true
		state[0] = ref.start
		for i := 1; i < n; i++ {
			d := t.depth[i]
			s := uint32(0)
			if state[d-1] != 0 {
				s = ref.step(state[d-1], t.label[i])
			}
			state[d] = s
			inside[i] = s != 0
		}
		// children before parents (a child follows its parent in the depth-first order)
		for i := n - 1; i >= 0; i-- {
			exits[i] = byteSet{}
			if !inside[i] {
				continue
			}
			depth[i] = t.depth[i]
			for j := i + 1; j < int(t.end[i]); j = int(t.end[j]) {
				if !inside[j] {
					exits[i].add(t.label[j])
					continue
				}
				depth[i] = max(depth[i], depth[j])
				for w := range exits[i] {
					exits[i][w] |= exits[j][w]
				}
			}
		}
		index := map[byteSet]uint32{}
		for i := range n {
			id, ok := index[exits[i]]
			if !ok {
				id = min(uint32(len(rn.exitSets)), maxExitSets)
				if id < maxExitSets {
					index[exits[i]] = id
					rn.exitSets = append(rn.exitSets, exits[i])
				}
			}
			rn.node[i] = uint32(depth[i])<<16 | id
		}
		// the masks by depth: each the one before it and the tokens exactly that deep
		words := sample.MaskWords(t.numTokens)
		ids := make([][]int32, t.maxDepth+1)
		for i := 1; i < n; i++ {
			if inside[i] {
				ids[t.depth[i]] = append(ids[t.depth[i]], t.tokensAt(i)...)
			}
		}
		rn.masks = make([]sample.Mask, t.maxDepth+1)
		all := make(sample.Mask, words*(t.maxDepth+1))
		for k := range rn.masks {
			rn.masks[k] = all[k*words : (k+1)*words : (k+1)*words]
			if k > 0 {
				copy(rn.masks[k], rn.masks[k-1])
			}
			for _, id := range ids[k] {
				rn.masks[k].Set(id)
			}
		}
		t.refs = append(t.refs, rn)
	}
}

// maxSimulationPairs bounds the (state, reference state) pairs simulationDepth explores; a
// DFA that needs more is credited with the depth reached (a smaller depth only takes fewer
// subtrees whole).
const maxSimulationPairs = 4096

// simulationDepth returns the largest h (at most limit) such that every input of at most h
// bytes that ref survives from its start keeps d alive and in non-accepting states from q,
// whether every such input of h+1 bytes kills d (dies: then no input inside ref longer
// than h survives, as in a counted repetition of ASCII characters when its count runs out),
// and the bytes that leave ref but keep d alive after some input of at most h bytes inside
// ref (a superset when the search stops at maxSimulationPairs).
// reps holds one byte of each class of the partition of the bytes by (d's class, ref's
// class). The search runs over pairs (d's state, ref's state) breadth first; a pair seen
// before adds nothing new, so once no new pair appears the depth is unbounded.
func simulationDepth(d *dfa, q uint32, ref *dfa, reps []byte, limit int) (h int, dies bool, exits byteSet) {
	type pair struct{ s, b uint32 }
	seen := map[pair]bool{{q, ref.start}: true}
	frontier := []pair{{q, ref.start}}
	var next []pair
	// exitReps gathers, over the pairs found, the representatives of the bytes that leave
	// the reference but not d; exits are their classes
	var exitReps byteSet
	addExits := func(p pair) {
		for _, c := range reps {
			if ref.step(p.b, c) == 0 && d.step(p.s, c) != 0 {
				exitReps.add(c)
			}
		}
	}
	defer func() { exits = exitClasses(exitReps, d, ref) }()
	addExits(pair{q, ref.start})
	for level := 1; level <= limit; level++ {
		next = next[:0]
		for _, p := range frontier {
			for _, c := range reps {
				b := ref.step(p.b, c)
				if b == 0 {
					continue
				}
				s := d.step(p.s, c)
				if s == 0 || d.accept[s] {
					return level - 1, diesAfter(d, q, ref, reps, level-1), exits
				}
				np := pair{s, b}
				if !seen[np] {
					if len(seen) >= maxSimulationPairs {
						return level - 1, false, exits
					}
					seen[np] = true
					addExits(np)
					next = append(next, np)
				}
			}
		}
		if len(next) == 0 {
			return limit, false, exits
		}
		frontier, next = next, frontier
	}
	return limit, false, exits
}

// exitClasses returns the bytes of the classes (in both d and ref) of the bytes in reps.
func exitClasses(reps byteSet, d, ref *dfa) byteSet {
	var set byteSet
	if reps.empty() {
		return set
	}
	var pairs [][2]uint8 // (d's class, ref's class) of the bytes of reps
	for c := range 256 {
		if reps.has(byte(c)) {
			pairs = append(pairs, [2]uint8{d.class[c], ref.class[c]})
		}
	}
	for b := range 256 {
		if slices.Contains(pairs, [2]uint8{d.class[b], ref.class[b]}) {
			set.add(byte(b))
		}
	}
	return set
}

// maxDiesLevel bounds the pairs diesAfter keeps for one length (it looks them up in a list).
const maxDiesLevel = 64

// diesAfter reports whether every input of h+1 bytes that ref survives from its start
// kills d from q. It follows every pair that inputs of each length reach (not only the new
// ones, as simulationDepth does), so it gives up (false) past maxSimulationPairs of them in
// all: a counted repetition of single-byte characters reaches one pair a length.
func diesAfter(d *dfa, q uint32, ref *dfa, reps []byte, h int) bool {
	type pair struct{ s, b uint32 }
	level := []pair{{q, ref.start}}
	var next []pair
	work := 0
	for n := 0; n < h; n++ {
		next = next[:0]
		for _, p := range level {
			for _, c := range reps {
				if b := ref.step(p.b, c); b != 0 {
					if np := (pair{d.step(p.s, c), b}); !slices.Contains(next, np) {
						next = append(next, np)
					}
				}
			}
		}
		if work += len(next); work > maxSimulationPairs || len(next) > maxDiesLevel {
			return false
		}
		level, next = next, level
	}
	for _, p := range level {
		for _, c := range reps {
			if ref.step(p.b, c) != 0 && d.step(p.s, c) != 0 {
				return false
			}
		}
	}
	return true
}

// classReps returns one byte of each class of the partition of the bytes by (a's class, b's
// class).
func classReps(a, b *dfa) []byte {
	var reps []byte
	seen := make([]bool, a.nclass*b.nclass)
	for c := range 256 {
		if k := int(a.class[c])*b.nclass + int(b.class[c]); !seen[k] {
			seen[k] = true
			reps = append(reps, byte(c))
		}
	}
	return reps
}
