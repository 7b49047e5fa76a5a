package spec

import "slices"

// NGram is the prompt-lookup proposer (an engine.Proposer): it matches the sequence's
// last n tokens, n from Max down to Min, at the most recent earlier place in the prompt
// and output, and proposes the tokens that followed there. It needs no model, and costs
// one backward scan of the sequence per proposal.
type NGram struct {
	// Min and Max bound the length of the suffix matched (Min at least 1).
	Min, Max int
}

// Propose returns up to most tokens that followed the latest earlier occurrence of the
// longest suffix of tokens (of Max tokens down to Min) found before; nil when no suffix of
// at least Min tokens occurs earlier.
//
// One backward scan finds it: every earlier position holding the last token starts a
// candidate, whose match length is counted backwards (up to Max); the longest wins, the
// latest among equals, and a match of Max tokens ends the scan.
func (g NGram) Propose(tokens []int32, most int) []int32 {
	lo, hi := max(g.Min, 1), g.Max
	n := len(tokens)
	if most <= 0 || hi < lo || n < lo+1 {
		return nil
	}
	hi = min(hi, n-1)
	last := tokens[n-1]
	best, bestLen := -1, 0 // end of the best earlier occurrence, and its match length
	for e := n - 2; e >= 0 && bestLen < hi; e-- {
		if tokens[e] != last {
			continue
		}
		l := 1
		for l < hi && l <= e && tokens[e-l] == tokens[n-1-l] {
			l++
		}
		if l > bestLen {
			best, bestLen = e, l
		}
	}
	if bestLen < lo {
		return nil
	}
	end := min(best+1+most, n)
	return slices.Clone(tokens[best+1 : end])
}
