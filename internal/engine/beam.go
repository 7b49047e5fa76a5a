package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// This file holds beam search (SamplingParams.UseBeamSearch), as vLLM ranks beams. A
// beam-search request of width W keeps up to W live beams, each a sequence of its own. When
// every live beam has its next logits row, the beams' top 2W continuations are pooled:
// those that end the sequence (an end-of-generation or stop token) join the finished
// beams, and the W best of the others, by length-penalized score, become the new live
// beams. A beam continued by several candidates is forked, its blocks shared copy on
// write; a beam continued by none is freed. The search ends after max_tokens steps (or at
// the context length, or with no live beam left), and the W best of the finished and live
// beams are the request's choices, in score order.

// beamSearch is a beam-search request's state.
type beamSearch struct {
	width int
	live  []*sequence // the live beams
	done  []beamResult
	steps int // tokens each live beam has generated
	made  int // beams made so far, for their ids
}

// beamState is one live beam's part of the search.
type beamState struct {
	cum float64   // cumulative log probability of its output tokens
	lps []Logprob // its tokens' logprobs, when the request asked for them
	// cands are the best continuations of its last logits row, set when the row arrives
	// (ready) and used when every live beam is ready.
	cands []sample.TokenLogprob
	alts  []sample.TokenLogprob // the row's top logprobs, for the chosen token's Logprob
	ready bool
	// reserve marks the first beam before the first selection: it holds the W running
	// slots the request will use.
	reserve bool
}

// beamResult is a finished beam.
type beamResult struct {
	tokens []int32 // output tokens
	lps    []Logprob
	cum    float64
	finish string
	stop   any
}

// beamScore is vLLM's ranking of a beam: its cumulative log probability divided by its
// length (prompt included, a final end token not counted) to the power penalty.
func beamScore(length int, endsWithStop bool, cum float64, penalty float32) float64 {
	if endsWithStop {
		length--
	}
	return cum / math.Pow(float64(max(length, 1)), float64(penalty))
}

// startBeams sets up request r's beam search with its first beam seq.
func startBeams(r *request, seq *sequence) {
	r.beam = &beamSearch{width: r.n, live: []*sequence{seq}, made: 1}
	seq.beam = &beamState{reserve: true}
}

// beamRow takes a live beam's logits row: its 2W best continuations. When it is the last
// live beam to get its row, the beams are ranked (selectBeams).
func (e *Engine) beamRow(seq *sequence, logits []float32) {
	r := seq.req
	bs := r.beam
	k := max(2*bs.width, r.params.TopLogprobs)
	_, top := sample.Logprobs(logits, -1, k)
	seq.beam.cands = top[:min(len(top), 2*bs.width)]
	seq.beam.alts = top[:min(len(top), r.params.TopLogprobs)]
	seq.beam.ready = true
	for _, b := range bs.live {
		if !b.beam.ready {
			return
		}
	}
	e.selectBeams(r)
}

// beamCand is one continuation of a live beam.
type beamCand struct {
	parent *sequence
	tok    sample.TokenLogprob
	cum    float64
	score  float64
}

// stopsBeam reports whether token tok ends a beam: an end-of-generation token (unless
// ignore_eos) or a stop token id; it returns the stop reason as an Output gives it.
func (e *Engine) stopsBeam(r *request, tok int32) (bool, any) {
	p := &r.params
	if slices.Contains(p.StopTokenIDs, tok) {
		return true, tok
	}
	return !p.IgnoreEOS && e.tok != nil && e.tok.IsEOG(int(tok)), nil
}

// selectBeams ranks the continuations of every live beam of r and moves the search on one
// token (see the file comment).
func (e *Engine) selectBeams(r *request) {
	bs := r.beam
	p := &r.params
	var next []beamCand
	for _, b := range bs.live {
		length := len(b.tokens) + 1
		for _, c := range b.beam.cands {
			cand := beamCand{parent: b, tok: c, cum: b.beam.cum + float64(c.Logprob)}
			if stop, reason := e.stopsBeam(r, c.ID); stop {
				bs.done = append(bs.done, beamResult{
					tokens: append(slices.Clone(b.tokens[b.numPrompt:]), c.ID),
					lps:    e.beamLogprobs(b, c.ID), cum: cand.cum, finish: FinishStop, stop: reason,
				})
				continue
			}
			cand.score = beamScore(length, false, cand.cum, p.LengthPenalty)
			next = append(next, cand)
		}
	}
	slices.SortStableFunc(next, func(a, b beamCand) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.tok.ID, b.tok.ID)
	})
	next = next[:min(len(next), bs.width)]
	bs.steps++
	if len(next) == 0 || bs.steps >= r.maxTokens || len(bs.live[0].tokens)+1 >= e.cfg.MaxModelLen {
		for _, c := range next {
			bs.done = append(bs.done, beamResult{
				tokens: append(slices.Clone(c.parent.tokens[c.parent.numPrompt:]), c.tok.ID),
				lps:    e.beamLogprobs(c.parent, c.tok.ID), cum: c.cum, finish: FinishLength,
			})
		}
		e.endBeams(r, nil)
		return
	}
	e.advanceBeams(r, next)
}

// beamLogprobs returns beam b's logprobs with token tok appended, when asked for.
func (e *Engine) beamLogprobs(b *sequence, tok int32) []Logprob {
	p := &b.req.params
	if !p.Logprobs && p.TopLogprobs == 0 {
		return nil
	}
	lp := Logprob{Token: sample.TokenLogprob{ID: tok, Logprob: float32(math.Inf(-1))}}
	for _, c := range b.beam.cands {
		if c.ID == tok {
			lp.Token = c
		}
	}
	// Every token more likely than the chosen one is among the candidates before it.
	lp.Rank = 1
	for _, c := range b.beam.cands {
		if c.Logprob > lp.Token.Logprob {
			lp.Rank++
		}
	}
	lp.Top = b.beam.alts
	return append(slices.Clone(b.beam.lps), lp)
}

// advanceBeams makes the chosen continuations the live beams: a parent's first child
// continues it, further children fork from it (sharing its blocks), and parents with no
// child are freed.
func (e *Engine) advanceBeams(r *request, next []beamCand) {
	bs := r.beam
	type child struct {
		seq  *sequence
		cand beamCand
	}
	var kids []child
	continued := make(map[*sequence]bool)
	// Forks first, while every parent still has its tokens and blocks as they were.
	for _, c := range next {
		if !continued[c.parent] {
			continued[c.parent] = true
			kids = append(kids, child{c.parent, c})
			continue
		}
		kid := e.newSequence(r, bs.made, c.parent.tokens, nil)
		kid.id = kvcache.RequestID(fmt.Sprintf("%s#b%d", r.id, bs.made))
		bs.made++
		kid.beam = &beamState{cum: c.parent.beam.cum, lps: c.parent.beam.lps, cands: c.parent.beam.cands, alts: c.parent.beam.alts}
		if !e.attach(c.parent, kid) {
			return
		}
		kids = append(kids, child{kid, c})
	}
	for _, b := range bs.live {
		if !continued[b] {
			e.sched.finish(b)
		}
	}
	bs.live = bs.live[:0]
	for _, k := range kids {
		st := k.seq.beam
		st.lps = e.beamLogprobs(k.seq, k.cand.tok.ID)
		st.cum, st.cands, st.alts, st.ready, st.reserve = k.cand.cum, nil, nil, false, false
		k.seq.tokens = append(k.seq.tokens, k.cand.tok.ID)
		bs.live = append(bs.live, k.seq)
	}
	slices.SortFunc(bs.live, func(a, b *sequence) int { return cmp.Compare(a.index, b.index) })
	r.seqs = bs.live
}

// endBeams ends a beam search: frees the live beams and sends the W best finished ones as
// the request's choices, best first, one Output each (err set: every choice aborted with
// it instead).
func (e *Engine) endBeams(r *request, err error) {
	bs := r.beam
	for _, b := range bs.live {
		if b.status != statusFinished {
			e.sched.finish(b)
		}
	}
	bs.live, r.seqs = nil, nil
	var results []beamResult
	if err == nil {
		results = bs.done
	}
	score := func(b beamResult) float64 {
		return beamScore(len(r.prompt)+len(b.tokens), b.finish == FinishStop, b.cum, r.params.LengthPenalty)
	}
	slices.SortStableFunc(results, func(a, b beamResult) int { return cmp.Compare(score(b), score(a)) })
	results = results[:min(len(results), r.n)]
	outs := make([]Output, r.n)
	for i := range outs {
		out := &outs[i]
		*out = Output{RequestID: r.id, Index: i, FinishReason: FinishAbort, Err: err}
		if i < len(results) {
			b := results[i]
			out.TokenIDs, out.Logprobs, out.CumulativeLogprob = b.tokens, b.lps, b.cum
			out.FinishReason, out.StopReason = b.finish, b.stop
			out.Text = e.decode(b.tokens, !r.params.KeepSpecialTokens)
			r.genCount += len(b.tokens)
		}
		r.reasons[i] = out.FinishReason
	}
	if len(results) > 0 {
		r.firstToken = e.cfg.Now()
	}
	e.mu.Lock()
	for i := range outs {
		e.stats.GenerationTokens += int64(len(outs[i].TokenIDs))
		if len(outs[i].TokenIDs) > 0 {
			e.stats.PromptTokens += int64(len(r.prompt))
		}
		e.stats.Finished[outs[i].FinishReason]++
	}
	e.mu.Unlock()
	for _, out := range outs {
		out.Usage = e.usage(r)
		r.out.push(out)
	}
	r.finished = r.n
	e.complete(r)
}

// decode returns the text of tokens ("" without a tokenizer).
func (e *Engine) decode(tokens []int32, skipSpecial bool) string {
	if e.tok == nil {
		return ""
	}
	ids := make([]int, len(tokens))
	for i, t := range tokens {
		ids[i] = int(t)
	}
	return e.tok.Decode(ids, skipSpecial)
}
