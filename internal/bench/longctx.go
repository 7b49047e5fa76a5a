package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// LongCtxOptions configures LongCtx.
type LongCtxOptions struct {
	// Policies are the KV policies to measure ("full" once, the others at each budget).
	Policies []string
	// Budgets are the token budgets of the policies that drop tokens.
	Budgets []int
	// SinkTokens are the attention sinks of each policy (kvasir.KVPolicyUnset: its
	// default).
	SinkTokens int
	// WindowTokens is the recent window of h2o and snapkv (kvasir.KVPolicyUnset: its
	// default); streaming's window is what its budget leaves.
	WindowTokens int
	// TrainedCtx is the model's context length: perplexity is reported apart for the
	// tokens within it and beyond it.
	TrainedCtx int
	// Selections are the selections h2o and snapkv are measured with, each at every
	// budget (kvasir.KVPolicySpec.Selection: "sequence", "layer", "head"); none: the
	// policy's default.
	Selections []string
}

// SelectionsOf returns the selections policy name is measured with ("" its default).
func (o LongCtxOptions) SelectionsOf(name string) []string {
	if (name == "h2o" || name == "snapkv") && len(o.Selections) > 0 {
		return o.Selections
	}
	return []string{""}
}

// Window returns the window_tokens of policy name: WindowTokens for h2o and snapkv, unset
// for the others.
func (o LongCtxOptions) Window(name string) int {
	if name == "h2o" || name == "snapkv" {
		return o.WindowTokens
	}
	return kvasir.KVPolicyUnset
}

// LongCtxRow is one policy at one budget over the text.
type LongCtxRow struct {
	Policy string `json:"policy"`
	// Selection is the selection of h2o and snapkv when one was asked for.
	Selection string `json:"selection,omitempty"`
	// BudgetTokens is the policy's budget (0 for full).
	BudgetTokens int `json:"budget_tokens"`
	// Tokens is the number of tokens scored (each predicted from the ones before it).
	Tokens int `json:"tokens"`
	// Perplexity is exp of the mean negative log probability of the scored tokens;
	// WithinContext of those at positions below the trained context, BeyondContext of the
	// rest (0 when the text does not reach past it).
	Perplexity    float64 `json:"perplexity"`
	WithinContext float64 `json:"perplexity_within_context"`
	BeyondContext float64 `json:"perplexity_beyond_context"`
	// VsFull is Perplexity over full attention's (0 when full was not measured).
	VsFull float64 `json:"perplexity_vs_full"`
	// TokensPerSecond is tokens scored per second of the request's wall time.
	TokensPerSecond float64 `json:"tokens_per_s"`
	// PeakKVTokens and PeakKVBytes are the most KV the sequence held at once (whole
	// blocks).
	PeakKVTokens int   `json:"peak_kv_tokens"`
	PeakKVBytes  int64 `json:"peak_kv_bytes"`
}

// LongCtx scores tokens under each policy and budget: one request whose prompt is the
// text, with prompt logprobs, through an engine that computes one token per step, so that
// the cache each token is scored against is the one its policy kept. done delivers each
// finished request's stats (kvasir.Options.OnRequestDone), for its peak KV; blockSize and
// bytesPerToken turn blocks into tokens and bytes.
func LongCtx(ctx context.Context, e *kvasir.Engine, tokens []int32, o LongCtxOptions, done <-chan kvasir.RequestStats, blockSize int, bytesPerToken int64) ([]LongCtxRow, error) {
	if len(tokens) < 2 {
		return nil, fmt.Errorf("longctx: %d tokens of text: need at least 2", len(tokens))
	}
	var rows []LongCtxRow
	for _, name := range o.Policies {
		budgets := o.Budgets
		if name == "full" {
			budgets = []int{0}
		}
		for _, sel := range o.SelectionsOf(name) {
			for _, b := range budgets {
				spec := kvasir.KVPolicySpec{Name: name, BudgetTokens: kvasir.KVPolicyUnset, SinkTokens: kvasir.KVPolicyUnset, WindowTokens: kvasir.KVPolicyUnset}
				if name != "full" {
					spec.BudgetTokens, spec.SinkTokens, spec.WindowTokens, spec.Selection = b, o.SinkTokens, o.Window(name), sel
				}
				row, err := longCtxRun(ctx, e, tokens, spec, o.TrainedCtx, done)
				if err != nil {
					return rows, fmt.Errorf("longctx: %s: %w", spec, err)
				}
				row.BudgetTokens, row.Selection = b, sel
				row.PeakKVBytes = int64(row.PeakKVTokens*blockSize) * bytesPerToken
				row.PeakKVTokens *= blockSize
				rows = append(rows, row)
			}
		}
	}
	for _, r := range rows {
		if r.Policy == "full" {
			for i := range rows {
				rows[i].VsFull = rows[i].Perplexity / r.Perplexity
			}
		}
	}
	return rows, nil
}

// longCtxRun scores tokens under one policy. PeakKVTokens comes back in blocks.
func longCtxRun(ctx context.Context, e *kvasir.Engine, tokens []int32, spec kvasir.KVPolicySpec, trained int, done <-chan kvasir.RequestStats) (LongCtxRow, error) {
	start := time.Now()
	ch, err := e.Generate(ctx, kvasir.Request{PromptTokens: tokens, KVPolicy: &spec,
		Params: kvasir.SamplingParams{MaxTokens: 1, PromptLogprobs: true, IgnoreEOS: true}})
	if err != nil {
		return LongCtxRow{}, err
	}
	var lps []kvasir.Logprob
	for out := range ch {
		if out.Err != nil {
			return LongCtxRow{}, out.Err
		}
		lps = append(lps, out.PromptLogprobs...)
	}
	wall := time.Since(start)
	var st kvasir.RequestStats
	select {
	case st = <-done:
	case <-ctx.Done():
		return LongCtxRow{}, ctx.Err()
	}
	if len(lps) != len(tokens)-1 {
		return LongCtxRow{}, fmt.Errorf("%d prompt logprobs for %d tokens", len(lps), len(tokens))
	}
	var all, within, beyond nll
	for i, lp := range lps {
		x := -float64(lp.Token.Logprob) // token i+1, predicted from tokens 0..i
		all.add(x)
		if i+1 < trained || trained <= 0 {
			within.add(x)
		} else {
			beyond.add(x)
		}
	}
	return LongCtxRow{Policy: spec.Name, Tokens: len(lps), Perplexity: all.ppl(), WithinContext: within.ppl(), BeyondContext: beyond.ppl(),
		TokensPerSecond: float64(len(tokens)) / wall.Seconds(), PeakKVTokens: st.PeakKVBlocks}, nil
}

// nll sums negative log probabilities.
type nll struct {
	sum float64
	n   int
}

func (s *nll) add(x float64) { s.sum += x; s.n++ }

// ppl returns exp of the mean (0 for no tokens).
func (s nll) ppl() float64 {
	if s.n == 0 {
		return 0
	}
	return math.Exp(s.sum / float64(s.n))
}

// WriteLongCtx writes the rows as a table.
func WriteLongCtx(w io.Writer, rows []LongCtxRow, trained int) {
	fmt.Fprintf(w, "%-15s %7s %7s %10s %10s %10s %8s %10s %12s\n", "policy", "budget", "tokens", "ppl", "ppl<"+strconv.Itoa(trained), "ppl>="+strconv.Itoa(trained), "vs full", "tok/s", "peak KV")
	for _, r := range rows {
		budget, beyond, vs := "-", "-", "-"
		if r.BudgetTokens > 0 {
			budget = strconv.Itoa(r.BudgetTokens)
		}
		if r.BeyondContext > 0 {
			beyond = fmt.Sprintf("%.3f", r.BeyondContext)
		}
		if r.VsFull > 0 {
			vs = fmt.Sprintf("%.3f", r.VsFull)
		}
		name := r.Policy
		if r.Selection != "" {
			name += "/" + r.Selection
		}
		fmt.Fprintf(w, "%-15s %7s %7d %10.3f %10.3f %10s %8s %10.1f %12s\n", name, budget, r.Tokens, r.Perplexity, r.WithinContext, beyond, vs, r.TokensPerSecond,
			fmt.Sprintf("%d tok %.1f KiB", r.PeakKVTokens, float64(r.PeakKVBytes)/1024))
	}
}
