package structured

import (
	"slices"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Reference languages let a lexeme walk take whole subtrees of the trie where no state of
// the lexeme's DFA loops on their bytes: inside a JSON string whose tokens mix ASCII and
// multi-byte UTF-8 (no single state loops on both a lead byte and a continuation byte), and
// inside counted repetitions, whose states never loop.
//
// Each reference is a fixed regular language R* (R a character class: JSON string
// characters, letters and digits). The trie records, per node, whether its path and every
// path of its subtree stay inside R* from the start (a bit per reference), and the depth of
// its deepest descendant. A lexeme's walk from DFA state q first finds, per reference, the
// largest h such that every string of at most h bytes that stays inside R* keeps q's DFA
// alive and never accepting (simulationDepth). Then a node whose bit is set and whose
// subtree is no deeper than h stays alive, with no lexeme end, at every node below it: its
// subtree's tokens are taken without stepping through its nodes. For an unbounded string h
// is unbounded; for [^"]{0,40} in a string h is 40, so the subtrees of tokens of at most 40
// bytes are taken whole.

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

// setReferences computes safe, maxBelow and the masks of covered and shallow (see
// TokenTrie): 2 x len(referenceClasses) x (the longest token + 1) masks of the
// vocabulary's size (about 12 MiB for Llama 3), built with the trie so that no mask pays
// for them.
func (t *TokenTrie) setReferences() {
	n := len(t.label)
	t.maxBelow = make([]uint16, n)
	for i := n - 1; i >= 0; i-- {
		m := t.depth[i]
		for j := i + 1; j < int(t.end[i]); j = int(t.end[j]) {
			m = max(m, t.maxBelow[j])
		}
		t.maxBelow[i] = m
	}
	t.safe = make([]uint8, n)
	t.cover = make([][]sample.Mask, len(referenceClasses))
	t.shallowMasks = make([][]sample.Mask, len(referenceClasses))
	state := make([]uint32, t.maxDepth+1)
	for r, ref := range referenceDFAs() {
		bit := uint8(1) << r
		// alive: the node's path stays inside R* (its bit is set for now)
		state[0] = ref.start
		for i := 1; i < n; i++ {
			d := t.depth[i]
			s := uint32(0)
			if state[d-1] != 0 {
				s = ref.step(state[d-1], t.label[i])
			}
			state[d] = s
			if s != 0 {
				t.safe[i] |= bit
			}
		}
		// safe: alive and every child safe (children follow their parent)
		for i := n - 1; i > 0; i-- {
			if t.safe[i]&bit == 0 {
				continue
			}
			for j := i + 1; j < int(t.end[i]); j = int(t.end[j]) {
				if t.safe[j]&bit == 0 {
					t.safe[i] &^= bit
					break
				}
			}
		}
		t.cover[r] = t.byDepth(r, t.maxBelow)
		t.shallowMasks[r] = t.byDepth(r, t.depth)
	}
}

// covered returns the tokens of the nodes inside reference r whose subtrees are at most h
// deep: the tokens that a walk with simulation depth h for r takes whole.
func (t *TokenTrie) covered(r, h int) sample.Mask { return t.cover[r][min(h, t.maxDepth)] }

// shallow returns the tokens of the nodes inside reference r at most h deep: those a
// state with simulation depth h for r allows by themselves.
func (t *TokenTrie) shallow(r, h int) sample.Mask { return t.shallowMasks[r][min(h, t.maxDepth)] }

// byDepth returns masks for every depth 0..maxDepth at once: the mask of depth k holds the
// tokens of the nodes inside reference r whose key is at most k, each mask being the one
// before it and the tokens whose key is exactly k.
func (t *TokenTrie) byDepth(r int, key []uint16) []sample.Mask {
	words := sample.MaskWords(t.numTokens)
	bit := uint8(1) << r
	ids := make([][]int32, t.maxDepth+1)
	for i := 1; i < len(t.label); i++ {
		if t.safe[i]&bit != 0 {
			ids[key[i]] = append(ids[key[i]], t.tokensAt(i)...)
		}
	}
	masks := make([]sample.Mask, t.maxDepth+1)
	all := make(sample.Mask, words*(t.maxDepth+1))
	for d := range masks {
		masks[d] = all[d*words : (d+1)*words : (d+1)*words]
		if d > 0 {
			copy(masks[d], masks[d-1])
		}
		for _, id := range ids[d] {
			masks[d].Set(id)
		}
	}
	return masks
}

// maxSimulationPairs bounds the (state, reference state) pairs simulationDepth explores; a
// DFA that needs more is credited with the depth reached (a smaller depth only takes fewer
// subtrees whole).
const maxSimulationPairs = 4096

// simulationDepth returns the largest h (at most limit) such that every input of at most h
// bytes that ref survives from its start keeps d alive and in non-accepting states from q,
// and whether every such input of h+1 bytes kills d (dies: then no input inside ref longer
// than h survives, as in a counted repetition of ASCII characters when its count runs out).
// reps holds one byte of each class of the partition of the bytes by (d's class, ref's
// class). The search runs over pairs (d's state, ref's state) breadth first; a pair seen
// before adds nothing new, so once no new pair appears the depth is unbounded.
func simulationDepth(d *dfa, q uint32, ref *dfa, reps []byte, limit int) (h int, dies bool) {
	type pair struct{ s, b uint32 }
	seen := map[pair]bool{{q, ref.start}: true}
	frontier := []pair{{q, ref.start}}
	var next []pair
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
					return level - 1, diesAfter(d, q, ref, reps, level-1)
				}
				np := pair{s, b}
				if !seen[np] {
					if len(seen) >= maxSimulationPairs {
						return level - 1, false
					}
					seen[np] = true
					next = append(next, np)
				}
			}
		}
		if len(next) == 0 {
			return limit, false
		}
		frontier, next = next, frontier
	}
	return limit, false
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
	seen := map[[2]uint8]bool{}
	for c := range 256 {
		k := [2]uint8{a.class[c], b.class[c]}
		if !seen[k] {
			seen[k] = true
			reps = append(reps, byte(c))
		}
	}
	return reps
}
