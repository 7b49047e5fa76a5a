package structured

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"time"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// Generation is the record of one simulated generation (see Simulate).
type Generation struct {
	Output  []byte          // the bytes generated
	Tokens  int             // tokens accepted (an end-of-generation token included)
	Masks   []time.Duration // the time of each mask
	Ended   bool            // an end-of-generation token was drawn
	Matches bool            // the output is in the grammar's language
}

// Simulate generates from g as a model that picks uniformly among the allowed tokens would:
// a mask, a random allowed token, Accept, until an end-of-generation token or maxTokens. It
// times every mask; it is what `kvasir bench grammar` measures.
func Simulate(g *TokenGrammar, rng *rand.Rand, maxTokens int) (Generation, error) {
	var gen Generation
	k := g.NewMasker()
	n := g.trie.numTokens
	for gen.Tokens < maxTokens {
		start := time.Now()
		m := k.Mask()
		gen.Masks = append(gen.Masks, time.Since(start))
		tok, ok := pickAllowed(m, n, rng)
		if !ok {
			return gen, fmt.Errorf("simulate: empty mask after %q", k.m.input)
		}
		if err := k.Accept([]int32{tok}); err != nil {
			if g.vocab.IsEOG(int(tok)) { // a dead end: the vocabulary cannot go on
				break
			}
			return gen, fmt.Errorf("simulate: %w", err)
		}
		gen.Tokens++
		if g.vocab.IsEOG(int(tok)) {
			gen.Ended = true
			break
		}
	}
	gen.Output = append([]byte(nil), k.m.input...)
	gen.Matches = k.m.Accepting()
	return gen, nil
}

// pickAllowed returns a uniformly random token of mask m over n tokens.
func pickAllowed(m sample.Mask, n int, rng *rand.Rand) (int32, bool) {
	total := m.Count(n)
	if total == 0 {
		return 0, false
	}
	r := rng.IntN(total)
	for w, word := range m {
		c := bits.OnesCount32(word)
		if r >= c {
			r -= c
			continue
		}
		for ; ; r-- {
			b := bits.TrailingZeros32(word)
			if r == 0 {
				return int32(32*w + b), true
			}
			word &^= 1 << uint(b)
		}
	}
	return 0, false
}
