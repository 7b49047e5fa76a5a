package engine

import (
	"fmt"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// newSequence makes choice index of r with the given tokens (the prompt, or a copy of the
// parent's tokens for a fork), with its own sampler seeded for the choice.
func (e *Engine) newSequence(r *request, index int, tokens []int32) *sequence {
	p := r.params
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed + uint64(index)
	} else {
		seed = e.rng.Uint64()
	}
	seq := &sequence{
		id:        kvcache.RequestID(fmt.Sprintf("%s#%d", r.id, index)),
		req:       r,
		index:     index,
		tokens:    slices.Clip(slices.Clone(tokens)),
		numPrompt: len(r.prompt),
		penalties: sample.NewPenalties(p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty, r.prompt),
	}
	var extra []sample.Processor
	if seq.penalties != nil {
		extra = append(extra, seq.penalties)
	}
	if len(p.LogitBias) > 0 {
		extra = append(extra, sample.LogitBias(p.LogitBias))
	}
	if p.MinTokens > 0 {
		seq.suppress = &sample.Suppress{IDs: e.minTokensBans(p)}
		extra = append(extra, seq.suppress)
	}
	topK := p.TopK
	if topK < 0 {
		topK = 0
	}
	seq.sampler = sample.New(sample.Params{Temperature: p.Temperature, TopK: topK, TopP: p.TopP, MinP: p.MinP, Seed: seed}, extra...)
	if e.tok != nil {
		seq.detok = tokenizer.NewDetokenizer(e.tok, !p.KeepSpecialTokens)
		seq.stop = sample.NewStopMatcher(p.Stop, p.IncludeStopStrInOutput)
	}
	return seq
}

// minTokensBans lists the tokens min_tokens holds back: end-of-generation tokens (unless
// ignore_eos) and stop token ids.
func (e *Engine) minTokensBans(p SamplingParams) []int32 {
	ids := slices.Clone(p.StopTokenIDs)
	if e.tok != nil && !p.IgnoreEOS {
		for id := range e.tok.NumTokens() {
			if e.tok.IsEOG(id) {
				ids = append(ids, int32(id))
			}
		}
	}
	return ids
}

// usage returns r's token counts so far.
func (e *Engine) usage(r *request) Usage {
	return Usage{PromptTokens: len(r.prompt), CompletionTokens: r.genCount, CachedPromptTokens: r.cached}
}

// fork starts choices 1..n-1 of parent's request from its state and samples their first
// tokens from the same logits; it returns their picks. The children share the parent's
// blocks; a parent preempted while its step ran holds none, and its children wait to be
// recomputed like it.
func (e *Engine) fork(parent *sequence, logits []float32) []pick {
	parent.forkPending = false
	r := parent.req
	var picks []pick
	for i := 1; i < r.n; i++ {
		child := e.newSequence(r, i, parent.tokens)
		r.seqs = append(r.seqs, child)
		if parent.status != statusRunning {
			e.sched.add(child)
		} else {
			child.numComputed = parent.numComputed
			if err := e.kv.Fork(parent.id, child.id); err != nil {
				// Cannot happen (the parent is held); fail the request rather than guess.
				e.sched.addRunning(child)
				e.failRequest(r, err)
				return nil
			}
			e.sched.addRunning(child)
		}
		if p, ok := e.sampleNext(child, logits); ok {
			picks = append(picks, p)
		}
	}
	return picks
}

// sampleNext samples seq's next token from its logits row and appends it (see accept);
// false when seq is finished.
func (e *Engine) sampleNext(seq *sequence, logits []float32) (pick, bool) {
	if seq.status == statusFinished {
		return pick{}, false
	}
	p := &seq.req.params
	if seq.suppress != nil {
		seq.suppress.Active = seq.numOutput() < p.MinTokens
	}
	var tok int32
	if e.model.CanSample() && seq.sampler.Plain() && seq.sampler.Params().Temperature > 0 {
		// Where plain samplers draw on the device, they draw the same way on the host
		// (a step with a logprobs request or a fork comes here), so that a seeded
		// request's tokens do not depend on what it was batched with.
		row := sampleRow(seq.sampler)
		tok = int32(sample.DrawIndexOrder(logits, row.Temperature, int(row.TopK), row.TopP, float64(row.Uniform)))
	} else {
		tok = int32(seq.sampler.Sample(logits))
	}
	var lp []Logprob
	if p.Logprobs || p.TopLogprobs > 0 {
		chosen, top := sample.Logprobs(logits, int(tok), p.TopLogprobs)
		lp = []Logprob{{Token: chosen, Top: top}}
	}
	return e.accept(seq, tok, lp), true
}

// accept appends a sampled token to seq with what the next sampling and the next step's
// input depend on (penalty counts, the request's token count), and returns the pick that
// emit handles later.
func (e *Engine) accept(seq *sequence, tok int32, lp []Logprob) pick {
	seq.tokens = append(seq.tokens, tok)
	seq.penalties.Accept(tok)
	seq.req.genCount++
	return pick{seq: seq, tok: tok, lp: lp, numOut: seq.numOutput(), length: len(seq.tokens)}
}

// emit handles an accepted token: takes its timestamps, detokenizes it, decides whether the
// choice ends (stop token, end of generation, stop string, max_tokens, context length) and
// streams the output. Timestamps are taken here, when the client can see the token.
func (e *Engine) emit(pk pick) {
	seq, tok := pk.seq, pk.tok
	r := seq.req
	p := &r.params
	now := e.cfg.Now()
	if seq.index == 0 {
		if r.firstToken.IsZero() {
			r.firstToken = now
		} else {
			r.itl = append(r.itl, now.Sub(r.lastToken))
		}
		r.lastToken = now
	}
	e.mu.Lock()
	e.stats.GenerationTokens++
	e.mu.Unlock()

	out := Output{RequestID: r.id, Index: seq.index, TokenIDs: []int32{tok}, Logprobs: pk.lp}
	finish, stopReason := "", any(nil)
	stopText := false
	checkStops := pk.numOut >= p.MinTokens
	switch {
	case checkStops && !p.IgnoreEOS && e.tok != nil && e.tok.IsEOG(int(tok)):
		finish = FinishStop
	case checkStops && slices.Contains(p.StopTokenIDs, tok):
		finish, stopReason = FinishStop, tok
	default:
		if seq.detok != nil {
			piece := seq.detok.Add(int(tok))
			if checkStops {
				emit, s, hit := seq.stop.Add(piece)
				out.Text = emit
				if hit {
					finish, stopReason, stopText = FinishStop, s, true
				}
			} else {
				out.Text = seq.stop.Flush() + piece
			}
		}
	}
	if finish == "" && (pk.numOut >= r.maxTokens || pk.length >= e.cfg.MaxModelLen) {
		finish = FinishLength
	}
	if finish != "" && !stopText && seq.detok != nil {
		// Release what was held back: an incomplete character, a partial stop string.
		tail := seq.detok.Flush()
		emit, s, hit := seq.stop.Add(tail)
		out.Text += emit
		if hit {
			stopReason = s
			finish = FinishStop
		} else {
			out.Text += seq.stop.Flush()
		}
	}
	if finish == "" {
		out.Usage = e.usage(r)
		r.out.push(out)
		return
	}
	e.finishSeqWith(seq, out, finish, stopReason, nil)
}

// finishSeq ends seq with an output carrying no new tokens.
func (e *Engine) finishSeq(seq *sequence, reason string, stopReason any, text string, err error) {
	e.finishSeqWith(seq, Output{RequestID: seq.req.id, Index: seq.index, Text: text}, reason, stopReason, err)
}

// finishSeqWith ends seq: frees its blocks, sends its last output, and completes the
// request when it was the last choice.
func (e *Engine) finishSeqWith(seq *sequence, out Output, reason string, stopReason any, err error) {
	r := seq.req
	e.sched.finish(seq)
	r.reasons[seq.index] = reason
	r.finished++
	out.FinishReason, out.StopReason, out.Err = reason, stopReason, err
	out.Usage = e.usage(r)
	r.out.push(out)
	e.mu.Lock()
	e.stats.Finished[reason]++
	e.mu.Unlock()
	if r.finished < r.n {
		return
	}
	r.out.close()
	delete(e.active, r.id)
	e.mu.Lock()
	delete(e.inFlight, r.id)
	e.mu.Unlock()
	if e.cfg.OnRequestDone != nil {
		e.cfg.OnRequestDone(e.requestStats(r))
	}
}

// requestStats summarizes a finished request.
func (e *Engine) requestStats(r *request) RequestStats {
	now := e.cfg.Now()
	st := RequestStats{
		RequestID: r.id, E2E: now.Sub(r.arrival), ITL: r.itl,
		PromptTokens: len(r.prompt), GenerationTokens: r.genCount, CachedPromptTokens: r.cached,
		FinishReasons: slices.Clone(r.reasons),
	}
	if !r.firstScheduled.IsZero() {
		st.QueueTime = r.firstScheduled.Sub(r.arrival)
	}
	if !r.firstToken.IsZero() {
		st.TTFT = r.firstToken.Sub(r.arrival)
	}
	return st
}
