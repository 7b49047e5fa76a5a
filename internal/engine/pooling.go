package engine

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/model"
)

// An engine with Config.Pooling set is a pooling engine (vLLM's pooling runner): every
// request is an embedding of its prompt by a causal model, one prefill and no decode. Its
// prompts go through the scheduler like any other (the token budget, chunked prefill,
// continuous batching with the other requests, preemption) and through the paged KV cache
// and its prefix cache: many inputs sharing a long instruction prefix compute it once.
// The step that computes a prompt's last token returns final hidden states (after the
// output norm) instead of logits, and the request finishes with its Output.Embedding.
//
// Last-token pooling needs the last token's hidden state only, so prefix hits serve it
// fully. Mean pooling needs every prompt position's, and a position whose KV came from
// the prefix cache was not computed, so its hidden state is nowhere: a mean-pooling
// request never takes prefix hits (it still offers its blocks, which last-token requests
// of the same model can use). Its steps return every prompt row, summed into the
// sequence as they come; a row computed again after a preemption is not summed twice.

// Pooling modes of Config.Pooling.
const (
	PoolLast = "last"
	PoolMean = "mean"
)

// HiddenModel is a Model that can return final hidden states instead of logits, which a
// pooling engine needs.
type HiddenModel interface {
	Model
	// ForwardHidden is Forward returning the final hidden state (after the output norm) of
	// each row of b.LogitsIndices, HiddenDim values each, row after row.
	ForwardHidden(b *model.Batch) ([]float32, error)
	// HiddenDim is the size of a hidden state.
	HiddenDim() int
}

// ForwardHidden runs a step without hidden rows (a prefill chunk before the last) as
// Forward, for its keys and values: model.ForwardHidden runs nothing without rows.
func (p *pagedModel) ForwardHidden(b *model.Batch) ([]float32, error) {
	if len(b.LogitsIndices) == 0 {
		_, err := p.m.Forward(b, p.kv)
		return []float32{}, err
	}
	return p.m.ForwardHidden(b, p.kv)
}

func (p *pagedModel) HiddenDim() int { return p.m.Config().Dim }

// checkPooling validates cfg.Pooling against the engine's other settings and model.
func checkPooling(cfg Config, m Model) error {
	switch cfg.Pooling {
	case "":
		return nil
	case PoolLast, PoolMean:
	default:
		return fmt.Errorf("engine: pooling %q: want %q or %q", cfg.Pooling, PoolLast, PoolMean)
	}
	if _, ok := m.(HiddenModel); !ok {
		return fmt.Errorf("engine: pooling %s: the model cannot return hidden states", cfg.Pooling)
	}
	if cfg.Speculation != nil {
		return fmt.Errorf("engine: pooling %s: speculative decoding has nothing to decode", cfg.Pooling)
	}
	return nil
}

// checkPoolingRequest refuses what an embedding request cannot have.
func checkPoolingRequest(req Request, p SamplingParams) error {
	switch {
	case p.N > 1:
		return paramErr("n", "an embedding request has one result")
	case p.UseBeamSearch:
		return paramErr("use_beam_search", "not supported by an embedding request")
	case p.PromptLogprobs:
		return paramErr("prompt_logprobs", "not supported by an embedding request")
	case len(req.Processors) > 0:
		return paramErr("processors", "an embedding request samples nothing")
	case req.ImportKV != nil:
		return paramErr("import_kv", "not supported by an embedding request")
	case req.KVPolicy != nil && req.KVPolicy.Name != "":
		return paramErr("kv_policy", "an embedding request keeps its whole prompt")
	}
	return nil
}

// pooled is a sequence whose embedding a step completed, for slow to hand out.
type pooled struct {
	seq *sequence
	vec []float32
}

// poolRows takes entry sc's hidden rows of a finished step (fast), the entry's first row
// being row first of hidden: mean pooling sums the rows of positions not summed yet, and
// the step that computes the prompt's last token completes the embedding.
func (e *Engine) poolRows(job *stepJob, sc *scheduled, hidden []float32, first int) {
	seq, dim := sc.seq, e.hiddenDim
	if e.cfg.Pooling == PoolMean {
		if seq.poolSum == nil {
			seq.poolSum = make([]float64, dim)
		}
		for k, o := range sc.rows {
			if sc.start+o != seq.poolCount {
				continue // summed already (the scheduler asks only for rows not pooled yet)
			}
			for i, v := range hidden[(first+k)*dim : (first+k+1)*dim] {
				seq.poolSum[i] += float64(v)
			}
			seq.poolCount++
		}
	}
	if !sc.sampling {
		return
	}
	vec := make([]float32, dim)
	if e.cfg.Pooling == PoolMean {
		if seq.poolCount != seq.numPrompt {
			e.failRequest(seq.req, fmt.Errorf("engine: mean pooling of %q summed %d of its %d positions", seq.id, seq.poolCount, seq.numPrompt))
			return
		}
		for i, s := range seq.poolSum {
			vec[i] = float32(s / float64(seq.numPrompt))
		}
	} else {
		last := first + len(sc.rows) - 1
		copy(vec, hidden[last*dim:(last+1)*dim])
	}
	job.pooled = append(job.pooled, pooled{seq: seq, vec: vec})
}

// finishPooled ends the sequences whose embeddings the step completed (slow), after their
// full blocks went to the prefix cache.
func (e *Engine) finishPooled(job *stepJob) {
	for _, p := range job.pooled {
		seq := p.seq
		if seq.status == statusFinished {
			continue
		}
		if r := seq.req; r.firstToken.IsZero() {
			r.firstToken = e.cfg.Now()
		}
		e.countTokens(seq.numPrompt, 0)
		e.finishSeqWith(seq, Output{RequestID: seq.req.id, Index: seq.index, Embedding: p.vec}, FinishStop, nil, nil)
	}
}

// sharesFresh reports, for a waiting sequence about to be admitted with numComputed
// tokens from the prefix cache, the key of its first block when the step being planned
// computes that block (none came from the cache) and whether it should wait: a sequence
// admitted earlier in this plan computes the same first block. Blocks are offered to the
// prefix cache only once a step is planned (Engine.offerPlanned), so inputs submitted
// together, which all share a long instruction prefix, would all compute it in the first
// step; the one waits a step instead and takes the prefix from the cache. Only a
// last-token pooling engine waits (waitsForShared): for generation the step a prompt
// waits is latency its first token pays.
func (s *scheduler) sharesFresh(seq *sequence, numComputed int, fresh map[string]bool) (string, bool) {
	bs := s.kv.BlockSize()
	if !s.waitsForShared || numComputed >= bs || len(seq.tokens) <= bs {
		return "", false
	}
	key := blockKey(seq.req.salt, seq.tokens[:bs])
	return key, fresh[key]
}

// blockKey names a first block by its salt and tokens.
func blockKey(salt string, tokens []int32) string {
	b := make([]byte, 0, len(salt)+1+4*len(tokens))
	b = append(append(b, salt...), 0)
	for _, t := range tokens {
		b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	return string(b)
}
