// Package promptcompress shortens prompts before they reach the target model, as
// LLMLingua does: a small language model scores how surprising each prompt token is (its
// negative log probability given the text before it), and a budget controller keeps the
// most informative text, coarse to fine: whole sentences first, ranked by their mean
// surprisal, then, inside the sentences kept, single tokens, the least surprising dropped
// first. Parts marked Keep (a chat's instructions, the question) pass through whole.
//
// One scoring pass feeds both stages (LLMLingua scores again after the coarse stage; one
// pass halves the scoring time, which is what a compressed prompt must win back). The
// scorer reads the prompt in windows of its own context length, every window one sequence
// of a batch.
package promptcompress

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Scorer is the small model that judges tokens.
type Scorer interface {
	// Encode tokenizes text without special tokens.
	Encode(text string) ([]int32, error)
	// Decode turns tokens back into text.
	Decode(ids []int32) (string, error)
	// Surprisal returns -log p(tokens[i] | tokens[:i]) for every token, in nats (the
	// scorer may condition on less than the whole prefix, e.g. a window of its context).
	Surprisal(ctx context.Context, tokens []int32) ([]float64, error)
}

// Part is one piece of a prompt: a chat message's content, or a stretch of a plain prompt.
type Part struct {
	Text string
	// Keep passes the part through unchanged (instructions, the question).
	Keep bool
}

// Result is a compressed prompt.
type Result struct {
	// Parts are the compressed texts, one per input part, in order.
	Parts []string
	// OriginalTokens and KeptTokens count the scorer's tokens before and after.
	OriginalTokens, KeptTokens int
}

// Text is the compressed prompt: its parts joined.
func (r Result) Text() string { return strings.Join(r.Parts, "") }

// CoarseSlack is how much more than the budget the coarse (sentence) stage keeps, as a
// fraction of the budget, for the fine (token) stage to trim: with none, the coarse stage
// alone would decide, and single tokens would never be weighed against whole sentences.
const CoarseSlack = 0.5

// ErrRate is returned for a rate outside (0, 1].
var ErrRate = errors.New("the compression rate must be in (0, 1]")

// CheckRate reports whether rate is a valid compression rate: the fraction of the
// prompt's tokens to keep, in (0, 1].
func CheckRate(rate float64) error {
	if math.IsNaN(rate) || rate <= 0 || rate > 1 {
		return fmt.Errorf("%w, got %v", ErrRate, rate)
	}
	return nil
}

// segment is a sentence of a compressible part, or a whole kept part.
type segment struct {
	part   int
	keep   bool
	tokens []int32
	start  int // index of its first token in the prompt
}

// Compress keeps about rate of the prompt's tokens (the budget): every token of the kept
// parts, and of the others the sentences and then the tokens that surprise the scorer
// most. When the kept parts alone exceed the budget, all the rest goes. A rate of 1
// returns the prompt unchanged without scoring it.
func Compress(ctx context.Context, sc Scorer, parts []Part, rate float64) (Result, error) {
	if err := CheckRate(rate); err != nil {
		return Result{}, err
	}
	segs, all, err := split(sc, parts)
	if err != nil {
		return Result{}, err
	}
	res := Result{OriginalTokens: len(all)}
	if rate == 1 || len(all) == 0 {
		res.KeptTokens = len(all)
		for _, p := range parts {
			res.Parts = append(res.Parts, p.Text)
		}
		return res, nil
	}
	surprisal, err := sc.Surprisal(ctx, all)
	if err != nil {
		return Result{}, fmt.Errorf("prompt compression: scoring: %w", err)
	}
	if len(surprisal) != len(all) {
		return Result{}, fmt.Errorf("prompt compression: the scorer gave %d surprisals for %d tokens", len(surprisal), len(all))
	}
	keep := choose(segs, surprisal, int(math.Round(rate*float64(len(all)))))
	res.Parts = make([]string, len(parts))
	kept := make([][]int32, len(parts))
	for i, p := range parts {
		if p.Keep {
			res.Parts[i] = p.Text
		}
	}
	for _, s := range segs {
		if s.keep {
			res.KeptTokens += len(s.tokens)
			continue
		}
		for j, id := range s.tokens {
			if keep[s.start+j] {
				kept[s.part] = append(kept[s.part], id)
			}
		}
	}
	for i, p := range parts {
		if p.Keep {
			continue
		}
		res.KeptTokens += len(kept[i])
		if res.Parts[i], err = sc.Decode(kept[i]); err != nil {
			return Result{}, fmt.Errorf("prompt compression: decoding part %d: %w", i, err)
		}
	}
	return res, nil
}

// split cuts the compressible parts into sentences and tokenizes every segment, returning
// the segments and the prompt's tokens (theirs, concatenated).
func split(sc Scorer, parts []Part) ([]segment, []int32, error) {
	var segs []segment
	var all []int32
	add := func(part int, keep bool, text string) error {
		ids, err := sc.Encode(text)
		if err != nil {
			return fmt.Errorf("prompt compression: tokenizing part %d: %w", part, err)
		}
		if len(ids) > 0 {
			segs = append(segs, segment{part: part, keep: keep, tokens: ids, start: len(all)})
			all = append(all, ids...)
		}
		return nil
	}
	for i, p := range parts {
		if p.Keep {
			if err := add(i, true, p.Text); err != nil {
				return nil, nil, err
			}
			continue
		}
		for _, s := range Sentences(p.Text) {
			if err := add(i, false, s); err != nil {
				return nil, nil, err
			}
		}
	}
	return segs, all, nil
}

// choose is the budget controller: it marks the tokens of the compressible segments to
// keep so that they and the kept segments together number budget (or the kept segments
// alone, when they exceed it). Coarse: the sentences of highest mean surprisal until
// (1+CoarseSlack) times the context's share of the budget; fine: of their tokens, the most
// surprising up to that share. Ties go to the earlier token.
func choose(segs []segment, surprisal []float64, budget int) []bool {
	keep := make([]bool, len(surprisal))
	ctxBudget := budget
	var ctxSegs []segment
	for _, s := range segs {
		if s.keep {
			ctxBudget -= len(s.tokens)
		} else {
			ctxSegs = append(ctxSegs, s)
		}
	}
	if ctxBudget <= 0 {
		return keep
	}
	mean := func(s segment) float64 {
		sum := 0.0
		for j := range s.tokens {
			sum += finite(surprisal[s.start+j])
		}
		return sum / float64(len(s.tokens))
	}
	sort.SliceStable(ctxSegs, func(a, b int) bool { return mean(ctxSegs[a]) > mean(ctxSegs[b]) })
	coarse := int(math.Ceil(float64(ctxBudget) * (1 + CoarseSlack)))
	var cand []int // token indexes the coarse stage keeps
	for _, s := range ctxSegs {
		if len(cand) >= coarse {
			break
		}
		for j := range s.tokens {
			cand = append(cand, s.start+j)
		}
	}
	sort.SliceStable(cand, func(a, b int) bool {
		sa, sb := finite(surprisal[cand[a]]), finite(surprisal[cand[b]])
		if sa != sb {
			return sa > sb
		}
		return cand[a] < cand[b]
	})
	for _, i := range cand[:min(ctxBudget, len(cand))] {
		keep[i] = true
	}
	return keep
}

// finite maps +Inf (a token the scorer found impossible, or could not score) to a large
// finite surprisal, so that means stay ordered.
func finite(v float64) float64 {
	if math.IsInf(v, 1) || math.IsNaN(v) {
		return 1e4
	}
	return v
}

// QuestionParts splits a prompt into its context, compressible, and its last sentence (the
// question), kept whole; a prompt of one sentence is kept whole.
func QuestionParts(text string) []Part {
	ss := Sentences(text)
	if len(ss) < 2 {
		return []Part{{Text: text, Keep: true}}
	}
	last := ss[len(ss)-1]
	return []Part{{Text: text[:len(text)-len(last)]}, {Text: last, Keep: true}}
}

// Sentences splits text into sentences, each with the white space after it, so that they
// join back into text: a sentence ends after '.', '!' or '?' (and any closing quotes or
// brackets) followed by white space or the end, and at every line break.
func Sentences(text string) []string {
	var out []string
	start, i := 0, 0
	for i < len(text) {
		r, w := utf8.DecodeRuneInString(text[i:])
		i += w
		if r != '\n' {
			if r != '.' && r != '!' && r != '?' {
				continue
			}
			for i < len(text) && strings.IndexByte(`"')]`, text[i]) >= 0 {
				i++
			}
			if next, _ := utf8.DecodeRuneInString(text[i:]); i < len(text) && !unicode.IsSpace(next) {
				continue
			}
		}
		for i < len(text) {
			next, w := utf8.DecodeRuneInString(text[i:])
			if !unicode.IsSpace(next) {
				break
			}
			i += w
		}
		out = append(out, text[start:i])
		start = i
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}
