package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/promptcompress"
)

// CompressOptions configures Compress.
type CompressOptions struct {
	// Rate is the compression rate (the fraction of prompt tokens kept).
	Rate float64
	// PromptTokens are the prompt lengths to measure, in the target's tokens.
	PromptTokens []int
	// AnswerTokens is the length of the reference answer: the text's continuation after
	// the prompt, whose perplexity the target reports.
	AnswerTokens int
	// Samples is how many disjoint stretches of the text each length is measured on.
	Samples int
}

// CompressRow is one prompt length, over the samples.
type CompressRow struct {
	PromptTokens int `json:"prompt_tokens"`
	// KeptTokens is the mean of the compressed prompts' lengths (target tokens, BOS left
	// out as in PromptTokens).
	KeptTokens int `json:"kept_tokens"`
	Samples    int `json:"samples"`
	// TTFTFull and TTFTCompressed are median times to the first token, the latter from
	// the start of the compression (scoring included); ScoreSeconds is the median time the
	// compression itself took. Speedup is TTFTFull / TTFTCompressed.
	TTFTFull       float64 `json:"ttft_full_s"`
	TTFTCompressed float64 `json:"ttft_compressed_s"`
	ScoreSeconds   float64 `json:"compress_s"`
	Speedup        float64 `json:"ttft_speedup"`
	// Perplexity of the reference answers under the target: after the whole prompt, the
	// compressed one, and the prompt's last KeptTokens tokens (truncation at the same
	// budget, the naive baseline).
	PerplexityFull       float64 `json:"answer_ppl_full"`
	PerplexityCompressed float64 `json:"answer_ppl_compressed"`
	PerplexityTruncated  float64 `json:"answer_ppl_truncated"`
}

// Compress measures prompt compression: for each length, samples of the text, each cut
// into a prompt (its last sentence kept whole as the question) and the answer that follows;
// the time to the first token of the target with the whole prompt and with the compressed
// one, and the answer's perplexity after each. Both engines should have prefix caching off,
// or later samples time cache hits.
func Compress(ctx context.Context, target *kvasir.Engine, sc promptcompress.Scorer, text string, o CompressOptions) ([]CompressRow, error) {
	all, err := target.Tokenize(text, false)
	if err != nil {
		return nil, err
	}
	bos, err := target.Tokenize("", true)
	if err != nil {
		return nil, err
	}
	var rows []CompressRow
	for _, n := range o.PromptTokens {
		if need := o.Samples * (n + o.AnswerTokens); need > len(all) {
			return nil, fmt.Errorf("bench compress: %d samples of %d+%d tokens need %d tokens of text, have %d", o.Samples, n, o.AnswerTokens, need, len(all))
		}
		row := CompressRow{PromptTokens: n, Samples: o.Samples}
		var full, comp, score []float64
		var nll [3]float64
		kept := 0
		for s := range o.Samples {
			at := s * (n + o.AnswerTokens)
			prompt, err := target.Detokenize(all[at:at+n], false)
			if err != nil {
				return nil, err
			}
			answer := all[at+n : at+n+o.AnswerTokens]
			promptIDs := append(slices.Clone(bos), all[at:at+n]...)
			// Full prompt.
			t0 := time.Now()
			if err := firstToken(ctx, target, promptIDs); err != nil {
				return nil, err
			}
			full = append(full, time.Since(t0).Seconds())
			// Compressed: scoring, then the target.
			t0 = time.Now()
			res, err := promptcompress.Compress(ctx, sc, promptcompress.QuestionParts(prompt), o.Rate)
			if err != nil {
				return nil, err
			}
			score = append(score, time.Since(t0).Seconds())
			compIDs, err := target.Tokenize(res.Text(), true)
			if err != nil {
				return nil, err
			}
			if err := firstToken(ctx, target, compIDs); err != nil {
				return nil, err
			}
			comp = append(comp, time.Since(t0).Seconds())
			kept += len(compIDs) - len(bos)
			truncIDs := append(slices.Clone(bos), all[at+n-(len(compIDs)-len(bos)):at+n]...)
			for i, p := range [][]int32{promptIDs, compIDs, truncIDs} {
				v, err := answerNLL(ctx, target, p, answer)
				if err != nil {
					return nil, err
				}
				nll[i] += v
			}
		}
		tokens := float64(o.Samples * o.AnswerTokens)
		row.KeptTokens = kept / o.Samples
		row.TTFTFull, row.TTFTCompressed, row.ScoreSeconds = median(full), median(comp), median(score)
		row.Speedup = row.TTFTFull / row.TTFTCompressed
		row.PerplexityFull, row.PerplexityCompressed, row.PerplexityTruncated = math.Exp(nll[0]/tokens), math.Exp(nll[1]/tokens), math.Exp(nll[2]/tokens)
		rows = append(rows, row)
	}
	return rows, nil
}

// firstToken runs prompt for one token.
func firstToken(ctx context.Context, e *kvasir.Engine, prompt []int32) error {
	ch, err := e.Generate(ctx, kvasir.Request{PromptTokens: prompt, Params: kvasir.SamplingParams{MaxTokens: 1}})
	if err != nil {
		return err
	}
	for o := range ch {
		if o.Err != nil {
			return o.Err
		}
	}
	return nil
}

// answerNLL is the sum of -log p of the answer's tokens after prompt under e.
func answerNLL(ctx context.Context, e *kvasir.Engine, prompt, answer []int32) (float64, error) {
	ids := append(slices.Clone(prompt), answer...)
	ch, err := e.Generate(ctx, kvasir.Request{PromptTokens: ids, Params: kvasir.SamplingParams{MaxTokens: 1, PromptLogprobs: true}})
	if err != nil {
		return 0, err
	}
	var lps []kvasir.Logprob
	for o := range ch {
		if o.Err != nil {
			return 0, o.Err
		}
		if o.PromptTokenIDs != nil {
			lps = o.PromptLogprobs
		}
	}
	if len(lps) != len(ids)-1 {
		return 0, fmt.Errorf("bench compress: %d prompt logprobs for %d tokens", len(lps), len(ids))
	}
	sum := 0.0
	for _, lp := range lps[len(lps)-len(answer):] {
		sum -= float64(lp.Token.Logprob)
	}
	return sum, nil
}

// median of xs (sorted in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// WriteCompress prints the rows as a table.
func WriteCompress(w io.Writer, rows []CompressRow, rate float64) {
	fmt.Fprintf(w, "rate %.2f\n%8s %6s %7s %10s %10s %9s %7s %9s %9s %9s\n", rate, "prompt", "kept", "samples", "ttft_full", "ttft_comp", "compress", "speedup", "ppl_full", "ppl_comp", "ppl_trunc")
	for _, r := range rows {
		fmt.Fprintf(w, "%8d %6d %7d %9.3fs %9.3fs %8.3fs %6.2fx %9.2f %9.2f %9.2f\n", r.PromptTokens, r.KeptTokens, r.Samples,
			r.TTFTFull, r.TTFTCompressed, r.ScoreSeconds, r.Speedup, r.PerplexityFull, r.PerplexityCompressed, r.PerplexityTruncated)
	}
}
