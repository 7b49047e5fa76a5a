package sample

// Penalties applies the repetition, presence and frequency penalties of one sequence, as
// vLLM and the OpenAI API define them:
//
//   - Repetition (> 1 discourages, 1 or 0 disables) divides a positive logit and multiplies a
//     negative one, for every token seen in the prompt or the output;
//   - Presence subtracts a fixed amount from every token that appeared in the output;
//   - Frequency subtracts an amount times the number of times the token appeared in the output.
//
// It must run on the raw logits, before candidates are pruned or reordered. It is a Stateful
// processor: Accept records the tokens appended to the output, Rollback takes the last ones
// back. A Penalties is not safe for concurrent use.
type Penalties struct {
	Repetition, Presence, Frequency float32

	prompt  map[int32]bool
	output  map[int32]int
	history []int32 // the output tokens in order, for Rollback
}

// NewPenalties returns the penalties of a sequence with the given prompt, or nil when every
// penalty is disabled (so that the caller can leave it out of the chain).
func NewPenalties(repetition, presence, frequency float32, prompt []int32) *Penalties {
	if (repetition == 0 || repetition == 1) && presence == 0 && frequency == 0 {
		return nil
	}
	p := &Penalties{Repetition: repetition, Presence: presence, Frequency: frequency,
		prompt: make(map[int32]bool), output: make(map[int32]int)}
	if p.repetitionOn() {
		for _, t := range prompt {
			p.prompt[t] = true
		}
	}
	return p
}

func (p *Penalties) repetitionOn() bool { return p.Repetition > 0 && p.Repetition != 1 }

// Accept records tokens appended to the output (Stateful).
func (p *Penalties) Accept(tokens []int32) error {
	for _, tok := range tokens {
		p.output[tok]++
	}
	p.history = append(p.history, tokens...)
	return nil
}

// Rollback forgets the last n output tokens (Stateful).
func (p *Penalties) Rollback(n int) {
	n = min(n, len(p.history))
	for _, tok := range p.history[len(p.history)-n:] {
		if p.output[tok]--; p.output[tok] == 0 {
			delete(p.output, tok)
		}
	}
	p.history = p.history[:len(p.history)-n]
}

// Clone returns an independent copy (for a forked sequence; Stateful).
func (p *Penalties) Clone() Stateful {
	q := *p
	q.prompt = p.prompt // never modified after construction
	q.output = make(map[int32]int, len(p.output))
	for k, v := range p.output {
		q.output[k] = v
	}
	q.history = append([]int32(nil), p.history...)
	return &q
}

// Process implements Processor.
func (p *Penalties) Process(c *Candidates) {
	if p == nil {
		return
	}
	for i, id := range c.IDs {
		count := p.output[id]
		v := c.Logits[i]
		if p.repetitionOn() && (count > 0 || p.prompt[id]) {
			if v > 0 {
				v /= p.Repetition
			} else {
				v *= p.Repetition
			}
		}
		if count > 0 {
			v -= p.Frequency*float32(count) + p.Presence
		}
		c.Logits[i] = v
	}
}
