package tokenizer

// rwkvModel is RWKV's "world" tokenizer (GGUF tokenizer model "rwkv"): token texts are byte
// strings written with escapes (\t \n \r \\ \xHH), and text is covered greedily from the left
// by the longest token that is a prefix of the rest. A byte no token starts with becomes the
// unknown token (or nothing when the vocabulary has none).
type rwkvModel struct {
	trie *byteTrie
	unk  int
}

func newRWKV(v *Vocab) *rwkvModel {
	m := &rwkvModel{trie: newByteTrie(), unk: v.UNK}
	for id, text := range v.Tokens {
		m.trie.insert(rwkvUnescape(text), id)
	}
	return m
}

func (m *rwkvModel) encode(fragment string, out []int, limit int) []int {
	for i := 0; i < len(fragment); {
		if limit > 0 && len(out) > limit {
			break
		}
		id, n := m.trie.longestPrefix(fragment[i:])
		if n == 0 {
			if m.unk >= 0 {
				out = append(out, m.unk)
			}
			i++
			continue
		}
		out = append(out, id)
		i += n
	}
	return out
}

// rwkvUnescape returns the bytes an RWKV token text stands for.
func rwkvUnescape(text string) []byte {
	out := make([]byte, 0, len(text))
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '\\' || i+1 == len(text) {
			out = append(out, c)
			continue
		}
		i++
		switch e := text[i]; e {
		case 't':
			out = append(out, '\t')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 'x':
			hi, ok1 := hexDigitAt(text, i+1)
			lo, ok2 := hexDigitAt(text, i+2)
			if ok1 && ok2 {
				out = append(out, hi<<4|lo)
				i += 2
			} else {
				out = append(out, '\\', 'x')
			}
		default:
			out = append(out, e)
		}
	}
	return out
}

func hexDigitAt(s string, i int) (byte, bool) {
	if i >= len(s) {
		return 0, false
	}
	return hexDigit(s[i])
}
