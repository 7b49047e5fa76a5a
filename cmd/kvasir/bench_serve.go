package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kvasir-llm/kvasir/internal/bench"
)

func init() {
	registerBench(benchmark{name: "serve", summary: "serving benchmark against any OpenAI-compatible server (vLLM's bench serve)", run: benchServe})
}

func benchServe(args []string) error {
	fs := newFlags("bench serve", "[--base-url URL] [--endpoint /v1/completions] [--dataset-name random|sharegpt|prefix-repetition|mooncake] [--num-prompts N] [--request-rate R] [--max-concurrency C] [--save-result] [--plot out.png]")
	o := bench.ServeOptions{Out: os.Stdout, Err: os.Stderr}
	fs.StringVar(&o.BaseURL, "base-url", "http://127.0.0.1:8000", "server base URL")
	host := fs.String("host", "127.0.0.1", "server host (used when --base-url is not given)")
	port := fs.Int("port", 8000, "server port (used when --base-url is not given)")
	fs.StringVar(&o.Endpoint, "endpoint", "/v1/completions", "API endpoint: /v1/completions or /v1/chat/completions")
	backend := fs.String("backend", "openai", "openai (completions) or openai-chat (switches the default endpoint to /v1/chat/completions)")
	fs.StringVar(&o.Model, "model", "", "model name sent in requests (default: the first model of GET /v1/models)")
	fs.StringVar(&o.APIKey, "api-key", "", "bearer token (default: $OPENAI_API_KEY)")
	fs.StringVar(&o.Label, "label", "", "label (prefix) of the result file (default: the backend)")
	tokRef := fs.String("tokenizer", "", "local tokenizer (a model file or folder, tokenizer.json, vocab GGUF) for exact prompt lengths and token counts; without it prompts use the server's /tokenize if any")

	d := &o.Dataset
	fs.StringVar(&d.Name, "dataset-name", bench.DatasetRandom, "random, sharegpt, prefix-repetition or mooncake")
	fs.StringVar(&d.Path, "dataset-path", "", "dataset file: ShareGPT JSON or Mooncake trace JSONL")
	fs.IntVar(&d.NumPrompts, "num-prompts", 1000, "number of requests (mooncake: the first N of the trace)")
	fs.Uint64Var(&d.Seed, "seed", 0, "random seed of prompts and arrivals")
	fs.IntVar(&d.RandomInputLen, "random-input-len", 1024, "random: input tokens per request")
	fs.IntVar(&d.RandomOutputLen, "random-output-len", 128, "random: output tokens per request")
	fs.Float64Var(&d.RandomRangeRatio, "random-range-ratio", 0, "random: lengths uniform in [L*(1-r), L*(1+r)], 0 <= r < 1")
	fs.IntVar(&d.RandomPrefixLen, "random-prefix-len", 0, "random: tokens of a prefix shared by every prompt")
	fs.IntVar(&d.ShareGPTOutputLen, "sharegpt-output-len", 0, fmt.Sprintf("sharegpt: output tokens (default: the reply's length, %d without a reply)", bench.DefaultShareGPTOutputLen))
	fs.IntVar(&d.PrefixLen, "prefix-repetition-prefix-len", 256, "prefix-repetition: tokens of each shared prefix")
	fs.IntVar(&d.SuffixLen, "prefix-repetition-suffix-len", 256, "prefix-repetition: tokens after the prefix")
	fs.IntVar(&d.NumPrefixes, "prefix-repetition-num-prefixes", 10, "prefix-repetition: distinct prefixes")
	fs.IntVar(&d.PrefixOut, "prefix-repetition-output-len", 128, "prefix-repetition: output tokens")
	fs.IntVar(&d.MooncakeBlockSize, "mooncake-block-size", bench.MooncakeTraceBlock, "mooncake: tokens per hash id (input lengths scale with it; smaller fits small models)")
	fs.Float64Var(&d.MooncakeTimeScale, "mooncake-time-scale", 1, "mooncake: multiplies the trace's timestamps (0.1 replays ten times faster)")
	fs.IntVar(&d.MooncakeMaxOutput, "mooncake-max-output-len", 0, "mooncake: caps each request's output tokens (0: the trace's; a small model's context may not hold the trace's longest)")
	inputLen := fs.Int("input-len", 0, "general input length: sets --random-input-len")
	outputLen := fs.Int("output-len", 0, "general output length: sets the random, sharegpt and prefix-repetition output lengths")

	fs.Float64Var(&o.RequestRate, "request-rate", math.Inf(1), "requests per second (inf: all at once); arrivals are a Poisson process, or gamma with --burstiness")
	fs.Float64Var(&o.Burstiness, "burstiness", 1, "gamma shape of the arrival gaps: 1 Poisson, < 1 burstier, > 1 more even")
	fs.IntVar(&o.MaxConcurrency, "max-concurrency", 0, "most requests in flight (0: no cap)")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", false, "ask the server to ignore end-of-sequence tokens (always on for the random dataset)")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "time limit of each request")
	metrics := fs.String("percentile-metrics", "ttft,tpot,itl", "metrics reported with percentiles: ttft, tpot, itl, e2el")
	percentiles := fs.String("metric-percentiles", "99", "percentiles reported, such as 50,90,99")
	var goodput []string
	fs.Func("goodput", `service level objectives for goodput, "ttft:500 tpot:50" (milliseconds; ttft, tpot, e2el)`, func(s string) error {
		goodput = append(goodput, s)
		return nil
	})
	fs.BoolVar(&o.SaveResult, "save-result", false, "save the vLLM-compatible JSON result")
	fs.StringVar(&o.ResultDir, "result-dir", "", "folder of the result file (default: the current one)")
	fs.StringVar(&o.ResultFilename, "result-filename", "", "result file name (default: LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json)")
	fs.StringVar(&o.PlotPath, "plot", "", "draw latency histograms and throughput over time into this PNG")
	fs.BoolVar(&o.DisableProgress, "disable-tqdm", false, "no progress bar")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["base-url"] && (set["host"] || set["port"]) {
		o.BaseURL = fmt.Sprintf("http://%s:%d", *host, *port)
	}
	if *backend == "openai-chat" && !set["endpoint"] {
		o.Endpoint = "/v1/chat/completions"
	} else if *backend != "openai" && *backend != "openai-chat" {
		return fmt.Errorf("--backend %q: want openai or openai-chat", *backend)
	}
	if o.APIKey == "" {
		o.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	if *inputLen > 0 {
		d.RandomInputLen = *inputLen
	}
	if *outputLen > 0 {
		d.RandomOutputLen, d.ShareGPTOutputLen, d.PrefixOut = *outputLen, *outputLen, *outputLen
	}
	var err error
	if o.PercentileMetrics, err = bench.ParseMetricNames(*metrics); err != nil {
		return err
	}
	if o.Percentiles, err = bench.ParsePercentiles(*percentiles); err != nil {
		return err
	}
	if len(goodput) > 0 {
		if o.Goodput, err = bench.ParseGoodput(strings.Join(goodput, " ")); err != nil {
			return err
		}
	}
	if *tokRef != "" {
		// A llama2.c tokenizer (.bin) names itself; other references go through the model
		// resolver (GGUF, tokenizer.json, a Hugging Face folder or hf:ORG/REPO).
		tokFile := ""
		if strings.HasSuffix(*tokRef, ".bin") {
			tokFile = *tokRef
		}
		t, err := openTokenizer(*tokRef, tokFile)
		if err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
		o.Tokenizer, o.TokenizerID = bench.FromTokenizer(t), *tokRef
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = bench.Serve(ctx, o)
	return err
}
