// Package sample turns logits into token choices: greedy argmax, and random sampling
// shaped by a chain of logits processors (temperature, top-k, top-p, min-p) with a seeded
// random source per sequence.
//
// A Processor edits a Candidates list in place; a Sampler applies its processors in order
// and draws from what is left. The engine adds its own processors (penalties, logit bias,
// grammar masks) to the same chain.
package sample

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Candidates is the set of tokens still in the running, with their logits. Sorted tells
// whether the entries are in decreasing logit order (processors that need the order set it).
type Candidates struct {
	IDs    []int32
	Logits []float32
	Sorted bool
}

// Reset fills c with every token of logits, in id order.
func (c *Candidates) Reset(logits []float32) {
	n := len(logits)
	if cap(c.IDs) < n {
		c.IDs = make([]int32, n)
	}
	c.IDs = c.IDs[:n]
	c.Logits = append(c.Logits[:0], logits...)
	for i := range c.IDs {
		c.IDs[i] = int32(i)
	}
	c.Sorted = false
}

// Len returns the number of candidates.
func (c *Candidates) Len() int { return len(c.IDs) }

// Truncate keeps the first n candidates.
func (c *Candidates) Truncate(n int) {
	if n < len(c.IDs) {
		c.IDs, c.Logits = c.IDs[:n], c.Logits[:n]
	}
}

// Sort orders the candidates by decreasing logit, the lower id first on ties.
func (c *Candidates) Sort() {
	if c.Sorted {
		return
	}
	idx := make([]int, len(c.IDs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		la, lb := c.Logits[a], c.Logits[b]
		switch {
		case la > lb:
			return -1
		case la < lb:
			return 1
		}
		return int(c.IDs[a] - c.IDs[b])
	})
	ids := make([]int32, len(idx))
	logits := make([]float32, len(idx))
	for i, j := range idx {
		ids[i], logits[i] = c.IDs[j], c.Logits[j]
	}
	c.IDs, c.Logits, c.Sorted = ids, logits, true
}

// Probs returns the softmax of the candidates' logits.
func (c *Candidates) Probs() []float64 {
	p := make([]float64, len(c.Logits))
	if len(p) == 0 {
		return p
	}
	m := float64(c.Logits[0])
	for _, v := range c.Logits {
		m = max(m, float64(v))
	}
	var sum float64
	for i, v := range c.Logits {
		p[i] = math.Exp(float64(v) - m)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// Processor edits the candidates before a token is drawn.
type Processor interface {
	Process(c *Candidates)
}

// Greedy returns the id of the largest logit, the lowest id on ties (-1 for none). NaNs
// are never chosen unless every logit is NaN (then 0).
func Greedy(logits []float32) int {
	if len(logits) == 0 {
		return -1
	}
	best := 0
	for i, v := range logits {
		if v > logits[best] || (logits[best] != logits[best] && v == v) {
			best = i
		}
	}
	return best
}

// Params are the usual sampling settings.
type Params struct {
	// Temperature divides the logits; 0 means greedy decoding.
	Temperature float32
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability reaches P (0 or
	// 1: all).
	TopP float32
	// MinP drops tokens less likely than MinP times the most likely one (0: none).
	MinP float32
	// Seed seeds the sequence's random source.
	Seed uint64
}

// Sampler draws tokens for one sequence. It is not safe for concurrent use.
type Sampler struct {
	p      Params
	greedy bool
	extra  int // processors given to New, which run before p's
	procs  []Processor
	rng    *rand.Rand
	cand   Candidates
}

// New returns a sampler for p: greedy when p.Temperature is 0, else temperature then top-k,
// top-p and min-p, drawing with a PCG source seeded by p.Seed. Extra processors run first,
// on the raw logits (penalties, biases, masks).
func New(p Params, extra ...Processor) *Sampler {
	s := &Sampler{p: p, greedy: p.Temperature <= 0, extra: len(extra), rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}
	s.procs = append(s.procs, extra...)
	if !s.greedy {
		if p.Temperature != 1 {
			s.procs = append(s.procs, Temperature(p.Temperature))
		}
		if p.TopK > 0 {
			s.procs = append(s.procs, TopK(p.TopK))
		}
		if p.TopP > 0 && p.TopP < 1 {
			s.procs = append(s.procs, TopP(p.TopP))
		}
		if p.MinP > 0 {
			s.procs = append(s.procs, MinP(p.MinP))
		}
	}
	return s
}

// Sample chooses the next token from logits (which it does not modify).
func (s *Sampler) Sample(logits []float32) int {
	if s.greedy && len(s.procs) == 0 {
		return Greedy(logits)
	}
	s.cand.Reset(logits)
	for _, p := range s.procs {
		p.Process(&s.cand)
	}
	if s.cand.Len() == 0 {
		return Greedy(logits)
	}
	if s.greedy {
		return int(s.cand.IDs[Greedy(s.cand.Logits)])
	}
	return int(s.cand.IDs[Draw(s.cand.Probs(), s.rng.Float64())])
}

// Plain reports whether s is only temperature, top-k and top-p (or greedy): no extra
// processors, and no min-p unless greedy (which ignores it). A plain sampler's draw can be
// made by a device sampler from Params and Uniform.
func (s *Sampler) Plain() bool { return s.extra == 0 && (s.greedy || s.p.MinP <= 0) }

// Greedy reports whether s is plain (see Plain) and greedy (temperature 0): its token is
// the argmax of the logits, so a backend may pick it on the device.
func (s *Sampler) Greedy() bool { return s.greedy && s.Plain() }

// Params returns the settings s was made with.
func (s *Sampler) Params() Params { return s.p }

// Uniform returns the next draw of s's random source, the one Sample would use for its
// next token, for a sampler that runs elsewhere (on a device) in s's place.
func (s *Sampler) Uniform() float64 { return s.rng.Float64() }

// Draw returns the index i at which the running sum of probs first exceeds u (u in [0,1)),
// or the last index when rounding leaves u beyond the total.
func Draw(probs []float64, u float64) int {
	var sum float64
	for i, p := range probs {
		sum += p
		if u < sum {
			return i
		}
	}
	return len(probs) - 1
}
