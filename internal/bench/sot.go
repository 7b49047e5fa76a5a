package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/sot"
)

// SoTOptions configures SoT.
type SoTOptions struct {
	// MaxTokens is the answer's length: the points' tokens together under
	// Skeleton-of-Thought, the plain answer's tokens (both ignore end-of-sequence, so that
	// the lengths are equal).
	MaxTokens int
	// Constrain holds the skeleton to a numbered list (sot.SkeletonRegex).
	Constrain bool
	// Repeats is how many times each question is answered each way, alternately; the
	// fastest of each counts (the least disturbed by other work on the machine).
	Repeats int
}

// SoTRow is one question answered both ways.
type SoTRow struct {
	Question string `json:"question"`
	Points   int    `json:"points"`
	Fallback bool   `json:"fallback"`
	// SkeletonTokens and AnswerTokens count the skeleton's and the answer's generated
	// tokens; PlainTokens the plain answer's.
	SkeletonTokens int     `json:"skeleton_tokens"`
	AnswerTokens   int     `json:"answer_tokens"`
	PlainTokens    int     `json:"plain_tokens"`
	SoTSeconds     float64 `json:"sot_s"`
	PlainSeconds   float64 `json:"plain_s"`
	// Speedup is PlainSeconds / SoTSeconds.
	Speedup float64 `json:"speedup"`
}

// SoT answers every question by Skeleton-of-Thought and plainly at the same output length,
// greedy, timing each (the fastest of o.Repeats); render makes a prompt of messages whose reply begins with prefill.
func SoT(ctx context.Context, e *kvasir.Engine, render func([]sot.Message, string) ([]int32, error), questions []string, o SoTOptions) ([]SoTRow, error) {
	var rows []SoTRow
	for qi, q := range questions {
		msgs := []sot.Message{{Role: "user", Content: q}}
		prompt, err := render(msgs, "")
		if err != nil {
			return nil, err
		}
		params := kvasir.SamplingParams{Temperature: 0, MaxTokens: o.MaxTokens, IgnoreEOS: true}
		plain := kvasir.Request{ID: fmt.Sprintf("bench-sot-plain-%d", qi), PromptTokens: prompt, Params: params}
		r := sot.Request{ID: fmt.Sprintf("bench-sot-%d", qi), Question: q, Params: params, Render: render, Plain: plain}
		if o.Constrain {
			r.Constrain = func(re string) (kvasir.Processor, error) { return e.Constrain(kvasir.StructuredOutput{Regex: re}) }
		}
		row := SoTRow{Question: q}
		var res sot.Result
		for rep := range max(o.Repeats, 1) {
			t0 := time.Now()
			ch, err := e.Generate(ctx, plain)
			if err != nil {
				return nil, err
			}
			for out := range ch {
				if out.Err != nil {
					return nil, out.Err
				}
				row.PlainTokens = out.Usage.CompletionTokens
			}
			plainS := time.Since(t0).Seconds()
			t0 = time.Now()
			if res, err = sot.Run(ctx, e, r, func(string) bool { return true }); err != nil {
				return nil, err
			}
			sotS := time.Since(t0).Seconds()
			if rep == 0 || plainS < row.PlainSeconds {
				row.PlainSeconds = plainS
			}
			if rep == 0 || sotS < row.SoTSeconds {
				row.SoTSeconds = sotS
			}
		}
		row.Points, row.Fallback = len(res.Points), res.Fallback
		row.SkeletonTokens = res.SkeletonTokens
		row.AnswerTokens = res.Usage.CompletionTokens - row.SkeletonTokens
		row.Speedup = row.PlainSeconds / row.SoTSeconds
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteSoT prints the rows and their totals.
func WriteSoT(w io.Writer, rows []SoTRow) {
	fmt.Fprintf(w, "%4s %6s %8s %8s %7s %8s %8s %7s\n", "q", "points", "skeleton", "answer", "plain", "sot", "plain", "speedup")
	var sotS, plainS float64
	for i, r := range rows {
		pts := fmt.Sprint(r.Points)
		if r.Fallback {
			pts = "plain"
		}
		fmt.Fprintf(w, "%4d %6s %8d %8d %7d %7.2fs %7.2fs %6.2fx\n", i, pts, r.SkeletonTokens, r.AnswerTokens, r.PlainTokens, r.SoTSeconds, r.PlainSeconds, r.Speedup)
		sotS += r.SoTSeconds
		plainS += r.PlainSeconds
	}
	if sotS > 0 {
		fmt.Fprintf(w, "all: plain %.2fs, skeleton-of-thought %.2fs: %.2fx\n", plainS, sotS, plainS/sotS)
	}
}
