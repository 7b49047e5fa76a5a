package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/format"
)

func init() {
	registerBench(benchmark{name: "longctx", summary: "perplexity, speed and KV memory of a long text under each KV policy and budget", run: benchLongCtx})
}

func benchLongCtx(args []string) error {
	fs := newFlags("bench longctx", "-m MODEL -f TEXT [--policies full,streaming] [--budgets 64,128] [--sink-tokens S] [--window-tokens W] [--selections sequence,layer,head] [--ctx N] [--json]")
	textPath := fs.String("f", "", "text file to score")
	policies := fs.String("policies", "full,streaming", "KV policies to measure, comma-separated (full once, the others at every budget)")
	budgets := fs.String("budgets", "64,128", "token budgets of the policies that drop tokens, comma-separated")
	sinks := fs.Int("sink-tokens", kvasir.KVPolicyUnset, "attention sinks of each policy (-1: the policy's default, 4)")
	window := fs.Int("window-tokens", kvasir.KVPolicyUnset, "recent window of h2o and snapkv (snapkv's observation window too; -1: the policy's default)")
	selections := fs.String("selections", "", "selections h2o and snapkv are measured with, comma-separated, each at every budget: sequence, layer, head (empty: the policy's default, sequence)")
	ctxTokens := fs.Int("ctx", 0, "tokens of the text to score (0: up to 4x the model's context length)")
	asJSON := fs.Bool("json", false, "print the rows as JSON")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if ef.model == "" || *textPath == "" || fs.NArg() > 0 || *ctxTokens < 0 {
		fs.Usage()
		return fmt.Errorf("need -m and -f (and a --ctx of at least 0)")
	}
	o := bench.LongCtxOptions{SinkTokens: *sinks, WindowTokens: *window}
	for _, p := range strings.Split(*policies, ",") {
		o.Policies = append(o.Policies, strings.TrimSpace(p))
	}
	if *selections != "" {
		for _, s := range strings.Split(*selections, ",") {
			o.Selections = append(o.Selections, strings.TrimSpace(s))
		}
	}
	for _, b := range strings.Split(*budgets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil || n <= 0 {
			return fmt.Errorf("--budgets %q: want positive token counts, comma-separated", *budgets)
		}
		o.Budgets = append(o.Budgets, n)
	}
	for _, p := range o.Policies {
		for _, b := range o.Budgets {
			for _, sel := range o.SelectionsOf(p) {
				spec := kvasir.KVPolicySpec{Name: p, BudgetTokens: b, SinkTokens: *sinks, WindowTokens: o.Window(p), Selection: sel}
				if p == "full" {
					spec = kvasir.KVPolicySpec{Name: p, BudgetTokens: kvasir.KVPolicyUnset, SinkTokens: kvasir.KVPolicyUnset, WindowTokens: kvasir.KVPolicyUnset}
				}
				if err := kvasir.CheckKVPolicy(spec, ef.blockSize); err != nil {
					return fmt.Errorf("--policies %s --budgets %d --selections %q: %w", p, b, sel, err)
				}
			}
		}
	}
	text, err := os.ReadFile(*textPath)
	if err != nil {
		return err
	}
	done := make(chan kvasir.RequestStats, 1)
	limit := *ctxTokens
	e, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		o.TrainedCtx = fm.Config.ContextLen
		if limit == 0 {
			limit = 4 * max(fm.Config.ContextLen, 256)
		}
		// One token a step: each token is scored against the cache its policy kept.
		opt.MaxNumBatchedTokens, opt.MaxNumSeqs = 1, 1
		// Room for the text and its one output token, in whole blocks.
		opt.MaxModelLen = limit + 1 + max(opt.BlockSize, 16)
		opt.OnRequestDone = func(st kvasir.RequestStats) { done <- st }
	})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintln(os.Stderr, e.KVCacheSizing())
	tokens, err := e.Tokenize(string(text), true)
	if err != nil {
		return err
	}
	tokens = tokens[:min(len(tokens), limit)]
	fmt.Fprintf(os.Stderr, "scoring %d tokens of %s (trained context %d)\n", len(tokens), *textPath, o.TrainedCtx)
	rows, err := bench.LongCtx(context.Background(), e, tokens, o, done, e.BlockSize(), e.Loaded().Model().KVBytesPerToken())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(rows)
	}
	bench.WriteLongCtx(os.Stdout, rows, o.TrainedCtx)
	return nil
}
