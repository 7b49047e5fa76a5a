package engine

import "slices"

// This file holds emitting: turning an accepted token into the text a client sees and
// deciding whether its choice ends there.

// emit handles an accepted token: takes its timestamps, detokenizes it, decides whether the
// choice ends (stop token, end of generation, stop string, max_tokens, context length) and
// streams the output. Timestamps are taken here, when the client can see the token.
func (e *Engine) emit(pk pick) {
	seq, tok := pk.seq, pk.tok
	r := seq.req
	p := &r.params
	now := e.cfg.Now()
	if r.firstToken.IsZero() {
		r.firstToken = now
	}
	c := &r.clocks[seq.index]
	prompt := 0
	switch {
	case c.tokens == 0:
		c.first = now
		// As vLLM counts it: a choice's whole prompt, cached or not, once it has its
		// first token.
		prompt = len(r.prompt)
	case c.lastStep != e.emitStep:
		c.itl = append(c.itl, now.Sub(c.last))
	}
	c.tokens++
	c.last, c.lastStep = now, e.emitStep
	e.countTokens(prompt, 1)
	r.genCount++

	out := Output{RequestID: r.id, Index: seq.index, TokenIDs: []int32{tok}, Logprobs: pk.lp}
	if seq.index == 0 && pk.numOut == 1 && p.PromptLogprobs {
		out.PromptLogprobs, out.PromptTokenIDs = r.promptLPs, r.prompt
	}
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
	if finish == "" && (pk.numOut >= r.maxTokens || pk.length >= r.maxLen) {
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
