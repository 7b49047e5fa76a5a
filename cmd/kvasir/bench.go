package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/energy"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

func init() {
	register(command{name: "bench", summary: "benchmarks: kernels, generate (and more sub-benchmarks)", run: runBench})
	registerBench(benchmark{name: "kernels", summary: "matrix-vector GB/s per weight type beside the memory bandwidth probe", run: benchKernels})
	registerBench(benchmark{name: "generate", summary: "prefill and decode speed of one sequence, and decode bandwidth", run: benchGenerate})
}

// benchmark is one `kvasir bench NAME` sub-benchmark. Each lives in a file of its own and
// adds itself with registerBench from an init function.
type benchmark struct {
	name    string
	summary string
	run     func(args []string) error
}

var benchmarks = map[string]benchmark{}

func registerBench(b benchmark) { benchmarks[b.name] = b }

func runBench(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		benchUsage()
		if len(args) == 0 {
			return errors.New("name a benchmark")
		}
		return nil
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		benchUsage()
		return fmt.Errorf("unknown benchmark %q", args[0])
	}
	return b.run(args[1:])
}

func benchUsage() {
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "Usage: kvasir bench <benchmark> [flags]\n\nBenchmarks:")
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, benchmarks[n].summary)
	}
}

func benchKernels(args []string) error {
	fs := newFlags("bench kernels", "[--threads N] [--rows R --cols C] [--types f32,q8_0,...] [--json]")
	threads := fs.Int("threads", 0, "worker threads (0: all cores)")
	var o bench.KernelsOptions
	fs.IntVar(&o.Rows, "rows", 8192, "weight rows")
	fs.IntVar(&o.Cols, "cols", 4096, "weight columns (a multiple of 256)")
	fs.IntVar(&o.Tokens, "tokens", 64, "tokens of the matrix-matrix (prefill) measurement")
	typeList := fs.String("types", "f32,f16,bf16,q8_0,q4_0,q4_k,q6_k", "weight types")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, name := range strings.Split(*typeList, ",") {
		t, err := quant.ParseType(strings.TrimSpace(name))
		if err != nil {
			return fmt.Errorf("--types: %w", err)
		}
		o.Types = append(o.Types, t)
	}
	p, err := kvasir.NewCPUPool(kvasir.Options{Threads: *threads})
	if err != nil {
		return err
	}
	defer p.Close()
	res, err := bench.Kernels(p, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(res)
	}
	bench.WriteKernels(os.Stdout, res)
	return nil
}

func benchGenerate(args []string) error {
	fs := newFlags("bench generate", "-m MODEL [--prompt-len L] [--gen-len N] [--verify-len K [--verify-batch 1,8]] [--threads T] [--json]")
	var o bench.GenerateOptions
	fs.IntVar(&o.PromptLen, "prompt-len", 128, "prompt tokens to prefill")
	fs.IntVar(&o.GenLen, "gen-len", 64, "tokens to decode (and verify steps to time)")
	fs.IntVar(&o.Chunk, "chunk", model.DefaultPrefillChunk, "prefill chunk size in tokens")
	fs.IntVar(&o.VerifyLen, "verify-len", 0, "also time speculative verify steps of 1+K tokens a sequence against 1-token steps (0: off)")
	verifyBatch := fs.String("verify-batch", "1", "batch sizes of the verify timing, comma-separated")
	asJSON := fs.Bool("json", false, "print one JSON object")
	ef := addEngineFlags(fs, loadFlags)
	if err := ef.parse(fs, args); err != nil {
		return err
	}
	for _, f := range strings.Split(*verifyBatch, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--verify-batch %q: want positive batch sizes, comma-separated", *verifyBatch)
		}
		o.VerifyBatches = append(o.VerifyBatches, n)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.PromptLen <= 0 || o.GenLen <= 0 {
		return fmt.Errorf("--prompt-len %d --gen-len %d: need positive lengths", o.PromptLen, o.GenLen)
	}
	start := time.Now()
	l, err := ef.load()
	if err != nil {
		return err
	}
	defer l.Close()
	fm := l.File()
	fmt.Fprintf(os.Stderr, "loaded %s (%s, %.1f MB of weights) in %v; probing memory bandwidth...\n",
		fm.Name(), fm.Config.Arch, float64(fm.Bytes())/1e6, time.Since(start).Round(time.Millisecond))
	o.Energy = energy.Open()
	defer o.Energy.Close()
	res, err := bench.Generate(l, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	bench.WriteGenerate(os.Stdout, res)
	return nil
}
