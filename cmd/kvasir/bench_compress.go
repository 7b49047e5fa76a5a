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
	"github.com/kvasir-llm/kvasir/internal/promptcompress"
)

func init() {
	registerBench(benchmark{name: "compress", summary: "prompt compression: time to first token and the reference answer's perplexity, with and without", run: benchCompress})
}

func benchCompress(args []string) error {
	fs := newFlags("bench compress", "-m TARGET [--compression-model SMALL] -f TEXT [--rate 0.5] [--prompt-tokens 448,4096] [--answer-tokens 32] [--samples 3] [--json]")
	textPath := fs.String("f", "", "text whose stretches are the prompts (and the answers that follow them)")
	small := fs.String("compression-model", "", "the model that scores prompt tokens (default: the target itself)")
	rate := fs.Float64("rate", 0.5, "compression rate: the fraction of prompt tokens kept, in (0, 1]")
	lengths := fs.String("prompt-tokens", "448,4096", "prompt lengths in target tokens, comma-separated")
	answer := fs.Int("answer-tokens", 32, "tokens of the reference answer (the text after the prompt)")
	samples := fs.Int("samples", 3, "stretches of the text per prompt length (TTFT: the median)")
	asJSON := fs.Bool("json", false, "print the rows as JSON")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if ef.model == "" || *textPath == "" || fs.NArg() > 0 || *answer < 1 || *samples < 1 {
		fs.Usage()
		return fmt.Errorf("need -m and -f (and --answer-tokens, --samples of at least 1)")
	}
	if err := promptcompress.CheckRate(*rate); err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	o := bench.CompressOptions{Rate: *rate, AnswerTokens: *answer, Samples: *samples}
	longest := 0
	for _, s := range strings.Split(*lengths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return fmt.Errorf("--prompt-tokens %q: want token counts of at least 2, comma-separated", *lengths)
		}
		o.PromptTokens = append(o.PromptTokens, n)
		longest = max(longest, n)
	}
	text, err := os.ReadFile(*textPath)
	if err != nil {
		return err
	}
	trained := 0
	target, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		trained = fm.Config.ContextLen
		// Samples differ, but a repeated stretch must not time a prefix-cache hit.
		opt.DisablePrefixCaching = true
		if opt.MaxModelLen == 0 {
			opt.MaxModelLen = longest + *answer + 2
		}
	})
	if err != nil {
		return err
	}
	defer target.Close()
	var sc promptcompress.Scorer = promptcompress.EngineScorer{Engine: target}
	if *small != "" {
		fm, err := openModel(*small, "")
		if err != nil {
			return fmt.Errorf("--compression-model: %w", err)
		}
		e, err := kvasir.OpenModel(fm, kvasir.Options{Threads: ef.threads, DisablePrefixCaching: true})
		if err != nil {
			return fmt.Errorf("--compression-model %s: %w", *small, err)
		}
		defer e.Close()
		sc = promptcompress.EngineScorer{Engine: e}
		fmt.Fprintf(os.Stderr, "compression model %s: scores in windows of %d tokens\n", *small, e.MaxModelLen()-2)
	}
	fmt.Fprintf(os.Stderr, "target %s: trained context %d, max model len %d\n", ef.model, trained, target.MaxModelLen())
	rows, err := bench.Compress(context.Background(), target, sc, string(text), o)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(rows)
	}
	bench.WriteCompress(os.Stdout, rows, *rate)
	return nil
}
