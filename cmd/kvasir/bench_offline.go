package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/energy"
)

func init() {
	registerBench(benchmark{name: "offline", summary: "throughput and latency of N requests pushed through the engine at once", run: benchOffline})
}

func benchOffline(args []string) error {
	fs := newFlags("bench offline", "-m MODEL --num-prompts N --input-len L --output-len L [--max-concurrency C] [--prefix-len P] [--dataset-path sharegpt.json] [--json-schema FILE] [--ignore-eos] [--json]")
	var o bench.OfflineOptions
	fs.IntVar(&o.NumPrompts, "num-prompts", 32, "number of requests")
	fs.IntVar(&o.InputLen, "input-len", 128, "random prompt tokens per request (after the shared prefix)")
	fs.IntVar(&o.OutputLen, "output-len", 64, "output tokens per request (ShareGPT: when the file has no reply)")
	fs.IntVar(&o.PrefixLen, "prefix-len", 0, "random tokens shared by every prompt, before its own")
	fs.IntVar(&o.Concurrency, "max-concurrency", 0, "requests in flight at once (0: all)")
	fs.StringVar(&o.DatasetPath, "dataset-path", "", "ShareGPT JSON file to take prompts from instead of random tokens")
	ignoreEOS := fs.Bool("ignore-eos", false, "generate the full output length past end-of-sequence tokens")
	schemaPath := fs.String("json-schema", "", "hold every reply to this JSON Schema (structured output, as response_format json_schema)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed for prompts")
	asJSON := fs.Bool("json", false, "print the results as JSON (vLLM's keys)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the run, the requests' time only (not the load), to this file")
	ef := addEngineFlags(fs, allEngineFlags)
	sf := addSamplingFlags(fs)
	if err := ef.parse(fs, args); err != nil {
		return err
	}
	if ef.model == "" || fs.NArg() > 0 || o.NumPrompts <= 0 || o.OutputLen <= 0 || o.InputLen < 0 || o.PrefixLen < 0 {
		fs.Usage()
		return fmt.Errorf("need -m, a positive --num-prompts and --output-len")
	}
	e, err := ef.openEngine(nil)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintln(os.Stderr, e.KVCacheSizing())
	if line := speculationLine(e); line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
	ctx := context.Background()
	reqs, err := bench.OfflineRequests(ctx, e, o, os.Stderr)
	if err != nil {
		return err
	}
	if *schemaPath != "" {
		schema, err := os.ReadFile(*schemaPath)
		if err != nil {
			return err
		}
		so := &kvasir.StructuredOutput{JSONSchema: schema}
		if _, err := e.Constrain(*so); err != nil { // refused before any request is sent
			return err
		}
		for i := range reqs {
			reqs[i].Structured = so
		}
	}
	params := sf.params(e.SamplingDefaults())
	params.IgnoreEOS = *ignoreEOS
	meter := energy.Open()
	defer meter.Close()
	var prof *os.File
	if *cpuProfile != "" {
		if prof, err = os.Create(*cpuProfile); err != nil {
			return fmt.Errorf("bench offline: --cpuprofile: %w", err)
		}
		defer prof.Close()
		if err := pprof.StartCPUProfile(prof); err != nil {
			return fmt.Errorf("bench offline: --cpuprofile %s: %w", *cpuProfile, err)
		}
	}
	span := meter.Start()
	res := bench.Offline(ctx, e, reqs, o.Concurrency, params)
	if prof != nil {
		pprof.StopCPUProfile()
		if err := prof.Close(); err != nil {
			return fmt.Errorf("bench offline: --cpuprofile %s: %w", *cpuProfile, err)
		}
	}
	report := span.End(res.TotalOutputTokens)
	res.Energy = &report
	if *asJSON {
		return printJSON(res)
	}
	bench.WriteOfflineSummary(os.Stdout, res)
	return nil
}
