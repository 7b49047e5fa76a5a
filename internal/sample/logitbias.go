package sample

import "math"

// LogitBias adds a bias to the logits of chosen tokens (OpenAI's logit_bias: -100 bans a
// token, 100 all but forces it). Ids absent from the candidates are ignored.
type LogitBias map[int32]float32

// Process implements Processor.
func (b LogitBias) Process(c *Candidates) {
	if len(b) == 0 {
		return
	}
	for i, id := range c.IDs {
		if v, ok := b[id]; ok {
			c.Logits[i] += v
		}
	}
	c.Sorted = false
}

// Suppress bans a set of tokens while Active is true (min_tokens holds back end-of-generation
// and stop tokens this way).
type Suppress struct {
	IDs    []int32
	Active bool
}

// Process implements Processor.
func (s *Suppress) Process(c *Candidates) {
	if s == nil || !s.Active || len(s.IDs) == 0 {
		return
	}
	ninf := float32(math.Inf(-1))
	for i, id := range c.IDs {
		for _, ban := range s.IDs {
			if id == ban {
				c.Logits[i] = ninf
				break
			}
		}
	}
}
