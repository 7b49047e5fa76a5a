package structured

import (
	"bytes"
	"fmt"
	"slices"
)

// Vocabulary is what the masks need of a tokenizer (tokenizer.Tokenizer has these).
type Vocabulary interface {
	NumTokens() int
	TokenBytes(id int) []byte
	IsSpecial(id int) bool
	IsEOG(id int) bool
}

// TokenTrie is the vocabulary as a byte trie laid out in depth-first order, built once per
// tokenizer and shared by every grammar: node i's subtree is nodes i..end[i]-1, so a walk
// that rejects a node skips its whole subtree with one jump. Special tokens are left out
// (a grammar never allows them); end-of-generation tokens are kept aside.
type TokenTrie struct {
	numTokens int
	eog       []int32
	// per node (node 0 is the root, the empty prefix)
	label []byte   // the byte on the edge into the node
	depth []uint16 // the length of the node's prefix
	end   []int32  // one past the node's last descendant
	first []int32  // tokens of node i are toks[first[i]:first[i+1]]
	toks  []int32
	// id identifies the vocabulary for caches: the count and a hash of every token.
	id string
	// maxDepth is the length of the longest token.
	maxDepth int
	// below[i] indexes belowSets: the bytes on the edges below node i (its descendants'
	// labels), so a walk can see at once that a subtree stays in a state that loops on them.
	below     []uint32
	belowSets []byteSet
	// refs holds, per reference language, what walks need of it (see reference.go).
	refs []refNodes
}

// NewTokenTrie builds the trie of v's tokens.
func NewTokenTrie(v Vocabulary) (*TokenTrie, error) {
	n := v.NumTokens()
	if n <= 0 {
		return nil, fmt.Errorf("token trie: empty vocabulary")
	}
	t := &TokenTrie{numTokens: n}
	type entry struct {
		b  []byte
		id int32
	}
	var entries []entry
	h := uint64(fnvOffset)
	for id := range n {
		b := v.TokenBytes(id)
		h = fnvAdd(h, b)
		h = fnvAdd(h, []byte{0xff})
		switch {
		case v.IsEOG(id):
			t.eog = append(t.eog, int32(id))
		case v.IsSpecial(id) || len(b) == 0:
		default:
			if len(b) > 1<<16-1 {
				return nil, fmt.Errorf("token trie: token %d is %d bytes long", id, len(b))
			}
			entries = append(entries, entry{b, int32(id)})
		}
	}
	t.id = fmt.Sprintf("%d:%016x", n, h)
	slices.SortFunc(entries, func(a, b entry) int {
		if c := bytes.Compare(a.b, b.b); c != 0 {
			return c
		}
		return int(a.id - b.id)
	})

	// Sorted keys visit the trie in depth-first order: each key shares a prefix with the
	// path so far; nodes deeper than that prefix are closed, the rest of the key opened.
	t.label = append(t.label, 0)
	t.depth = append(t.depth, 0)
	t.end = append(t.end, 0)
	t.first = append(t.first, 0)
	path := []int32{0} // node at each depth of the current path
	var prev []byte
	for _, e := range entries {
		common := 0
		for common < len(prev) && common < len(e.b) && prev[common] == e.b[common] {
			common++
		}
		for len(path) > common+1 {
			last := path[len(path)-1]
			t.end[last] = int32(len(t.label))
			path = path[:len(path)-1]
		}
		for d := common; d < len(e.b); d++ {
			t.label = append(t.label, e.b[d])
			t.depth = append(t.depth, uint16(d+1))
			t.maxDepth = max(t.maxDepth, d+1)
			t.end = append(t.end, 0)
			t.first = append(t.first, int32(len(t.toks)))
			path = append(path, int32(len(t.label)-1))
		}
		t.toks = append(t.toks, e.id)
		prev = e.b
	}
	for _, node := range path {
		t.end[node] = int32(len(t.label))
	}
	t.first = append(t.first, int32(len(t.toks)))
	t.setBelow()
	t.setReferences()
	return t, nil
}

// setBelow computes below, children before parents (a child follows its parent in the
// depth-first order).
func (t *TokenTrie) setBelow() {
	n := len(t.label)
	sets := make([]byteSet, n)
	for i := n - 1; i >= 0; i-- {
		for j := i + 1; j < int(t.end[i]); j = int(t.end[j]) {
			for w := range sets[i] {
				sets[i][w] |= sets[j][w]
			}
			sets[i].add(t.label[j])
		}
	}
	index := map[byteSet]uint32{}
	t.below = make([]uint32, n)
	for i, set := range sets {
		id, ok := index[set]
		if !ok {
			id = uint32(len(t.belowSets))
			index[set] = id
			t.belowSets = append(t.belowSets, set)
		}
		t.below[i] = id
	}
}

// tokensAt returns the tokens whose bytes are node i's prefix.
func (t *TokenTrie) tokensAt(i int) []int32 { return t.toks[t.first[i]:t.first[i+1]] }

// NumTokens returns the vocabulary size (the length of masks in tokens).
func (t *TokenTrie) NumTokens() int { return t.numTokens }

// NumNodes returns the number of trie nodes (the root included).
func (t *TokenTrie) NumNodes() int { return len(t.label) }

const fnvOffset = 14695981039346656037

func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
