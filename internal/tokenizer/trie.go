package tokenizer

// byteTrie maps byte strings to token ids, for the tokenizers that match tokens by prefix
// (unigram, RWKV).
type byteTrie struct {
	next map[byte]*byteTrie
	id   int // -1 when no token ends here
}

func newByteTrie() *byteTrie { return &byteTrie{id: -1} }

// insert adds key with id; a later insert of the same key replaces the id.
func (t *byteTrie) insert(key []byte, id int) {
	n := t
	for _, c := range key {
		child := n.next[c]
		if child == nil {
			if n.next == nil {
				n.next = make(map[byte]*byteTrie)
			}
			child = newByteTrie()
			n.next[c] = child
		}
		n = child
	}
	n.id = id
}

// longestPrefix returns the id and length of the longest key that is a prefix of s, or
// -1, 0.
func (t *byteTrie) longestPrefix(s string) (id, n int) {
	id = -1
	node := t
	for i := 0; i < len(s); i++ {
		node = node.next[s[i]]
		if node == nil {
			break
		}
		if node.id >= 0 {
			id, n = node.id, i+1
		}
	}
	return id, n
}
