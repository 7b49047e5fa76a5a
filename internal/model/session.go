package model

import "fmt"

// DefaultBlockSize is the number of token slots in one KV cache block.
const DefaultBlockSize = 16

// DefaultPrefillChunk is how many prompt tokens a Session runs per forward step.
const DefaultPrefillChunk = 512

// Session runs one sequence on a Model: a KV cache of its own with a contiguous block
// table, prompts prefilled in chunks as batched matrix products, and decoding one token per
// step, with none of the engine's scheduling: what `kvasir bench generate` times.
type Session struct {
	m     *Model
	kv    *KVCache
	table []int32
	pos   int
	// Chunk is the most prompt tokens run in one step (DefaultPrefillChunk when 0).
	Chunk int
}

// NewSession makes a session for sequences of up to maxTokens tokens (the model's context
// length when maxTokens <= 0). A maxTokens beyond the context length the model was trained
// for is allowed; quality past it is the caller's concern.
func (m *Model) NewSession(maxTokens int) (*Session, error) {
	if maxTokens <= 0 {
		maxTokens = m.cfg.ContextLen
	}
	if maxTokens <= 0 {
		return nil, fmt.Errorf("session: no token limit given and the model has no context length")
	}
	blocks := (maxTokens + DefaultBlockSize - 1) / DefaultBlockSize
	kv, err := m.NewKVCache(blocks, DefaultBlockSize)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	return &Session{m: m, kv: kv, table: table}, nil
}

// Len returns the number of tokens in the sequence so far.
func (s *Session) Len() int { return s.pos }

// Cap returns the most tokens the session holds.
func (s *Session) Cap() int { return s.kv.Slots() }

// Reset empties the sequence.
func (s *Session) Reset() { s.pos = 0 }

// Truncate drops the tokens from position n on, so that generation continues from there.
func (s *Session) Truncate(n int) {
	if n >= 0 && n < s.pos {
		s.pos = n
	}
}

// Prefill appends tokens to the sequence, in chunks of s.Chunk tokens, and returns the
// logits that follow the last one.
func (s *Session) Prefill(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("session: prefill of no tokens")
	}
	chunk := s.Chunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	var logits []float32
	for start := 0; start < len(tokens); start += chunk {
		end := min(start+chunk, len(tokens))
		var err error
		if logits, err = s.run(tokens[start:end], end == len(tokens)); err != nil {
			return nil, err
		}
	}
	return logits, nil
}

// Step appends one token and returns the logits that follow it.
func (s *Session) Step(token int32) ([]float32, error) {
	return s.run([]int32{token}, true)
}

// StepGreedy appends one token and returns the most likely next token (sample.Greedy of
// the logits Step would return). A backend that picks it on the device
// (backend.ArgmaxLogits) copies back one id instead of the vocabulary's logits.
func (s *Session) StepGreedy(token int32) (int32, error) {
	b, err := s.batch([]int32{token}, true)
	if err != nil {
		return 0, err
	}
	ids, err := s.m.ForwardGreedy(b, s.kv, nil)
	if err != nil {
		return 0, fmt.Errorf("session: %w", err)
	}
	s.pos++
	return ids[0], nil
}

// run appends tokens in one forward step, returning the last token's logits when asked.
func (s *Session) run(tokens []int32, wantLogits bool) ([]float32, error) {
	b, err := s.batch(tokens, wantLogits)
	if err != nil {
		return nil, err
	}
	logits, err := s.m.Forward(b, s.kv)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	s.pos += len(tokens)
	return logits, nil
}

// batch is the forward step that appends tokens at the session's position, with the last
// token's logits wanted or not. It fails when the tokens would overflow the cache.
func (s *Session) batch(tokens []int32, wantLogits bool) (*Batch, error) {
	n := len(tokens)
	if s.pos+n > s.kv.Slots() {
		return nil, fmt.Errorf("session: %d tokens would exceed the %d-token context", s.pos+n, s.kv.Slots())
	}
	b := &Batch{
		Tokens:      tokens,
		Positions:   make([]int32, n),
		SlotMapping: make([]int32, n),
		Seqs:        []Seq{{BlockTable: s.table, QueryStart: 0, QueryLen: n, ContextLen: s.pos + n}},
	}
	for i := range n {
		b.Positions[i] = int32(s.pos + i)
		b.SlotMapping[i] = int32(s.pos + i) // blocks are contiguous: slot = position
	}
	if wantLogits {
		b.LogitsIndices = []int{n - 1}
	}
	return b, nil
}

// Score appends tokens to the sequence, in chunks of s.Chunk tokens, and returns the
// logits that follow each of them: len(tokens) rows of the vocabulary's size, row i
// predicting the token after tokens[i]. It is what perplexity needs: every position's
// full distribution, not only the last one's.
func (s *Session) Score(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("session: score of no tokens")
	}
	chunk := s.Chunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	out := make([]float32, 0, len(tokens)*s.m.cfg.VocabSize)
	for start := 0; start < len(tokens); start += chunk {
		end := min(start+chunk, len(tokens))
		b, err := s.batch(tokens[start:end], false)
		if err != nil {
			return nil, err
		}
		b.LogitsIndices = make([]int, end-start)
		for i := range b.LogitsIndices {
			b.LogitsIndices[i] = i
		}
		logits, err := s.m.Forward(b, s.kv)
		if err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
		s.pos += end - start
		out = append(out, logits...)
	}
	return out, nil
}
