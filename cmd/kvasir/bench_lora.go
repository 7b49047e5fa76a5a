package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/lora"
)

func init() {
	registerBench(benchmark{name: "lora", summary: "throughput of N requests spread over K LoRA adapters in one batch, against the base model alone", run: benchLoRA})
}

// loraBenchResult is bench lora's JSON: every pair of runs, the median of the ratios of
// their output throughputs, and the same of the process CPU time per output token (base
// over LoRA: what one output token of the base costs as a share of one with adapters,
// steadier than wall time on a shared machine; absent where CPU time is not read).
type loraBenchResult struct {
	Adapters  int                   `json:"adapters"`
	Rank      int                   `json:"rank"`
	Targets   string                `json:"targets"`
	Base      []bench.OfflineResult `json:"base"`
	LoRA      []bench.OfflineResult `json:"lora"`
	BaseCPUms []float64             `json:"base_cpu_ms_per_output_token,omitempty"`
	LoRACPUms []float64             `json:"lora_cpu_ms_per_output_token,omitempty"`
	Ratios    []float64             `json:"output_throughput_ratios"`
	Ratio     float64               `json:"median_output_throughput_ratio"`
	CPURatios []float64             `json:"cpu_per_token_ratios,omitempty"`
	CPURatio  float64               `json:"median_cpu_per_token_ratio,omitempty"`
}

func benchLoRA(args []string) error {
	fs := newFlags("bench lora", "-m MODEL --num-prompts N --input-len L --output-len L --adapters K --lora-rank R [--targets all|attn] [--json]")
	var o bench.OfflineOptions
	fs.IntVar(&o.NumPrompts, "num-prompts", 32, "number of requests (each run)")
	fs.IntVar(&o.InputLen, "input-len", 128, "random prompt tokens per request")
	fs.IntVar(&o.OutputLen, "output-len", 64, "output tokens per request (end-of-sequence ignored)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed for prompts and adapters")
	k := fs.Int("adapters", 4, "distinct random adapters the requests are spread over, round robin")
	rank := fs.Int("lora-rank", 16, "rank of the adapters")
	targets := fs.String("targets", "all", "projections the adapters change: all (q, k, v, o, gate, up, down) or attn (q, k, v, o)")
	repeats := fs.Int("repeats", 3, "pairs of runs (base and with adapters, in alternating order); the median ratio is reported")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := ef.parse(fs, args); err != nil {
		return err
	}
	tg := map[string][]lora.Target{"all": {lora.Q, lora.K, lora.V, lora.O, lora.Gate, lora.Up, lora.Down}, "attn": {lora.Q, lora.K, lora.V, lora.O}}[*targets]
	if ef.model == "" || fs.NArg() > 0 || o.NumPrompts <= 0 || o.OutputLen <= 0 || *k < 1 || *rank < 1 || *repeats < 1 || tg == nil {
		fs.Usage()
		return fmt.Errorf("need -m, a positive --num-prompts, --output-len, --adapters and --lora-rank, and --targets all or attn")
	}
	setFlags := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { setFlags[f.Name] = true })
	dir, err := os.MkdirTemp("", "kvasir-bench-lora-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		// Every run computes its prompts: the base's cached blocks would flatter it.
		opt.DisablePrefixCaching, opt.EnableLoRA = true, true
		if !setFlags["max-loras"] {
			opt.MaxLoRAs = *k
		}
		opt.MaxLoRARank = max(opt.MaxLoRARank, *rank)
		for i := range *k {
			path := filepath.Join(dir, fmt.Sprintf("adapter%d", i))
			a := lora.Random(fm.Config, *rank, float64(2**rank), tg, 0.02, o.Seed+uint64(i)+1)
			if err := lora.WritePEFT(path, a, fm.Config, fm.Config.RopeStyle == format.RopeInterleaved); err != nil {
				fmt.Fprintln(os.Stderr, "kvasir:", err)
				continue
			}
			opt.LoRAModules = append(opt.LoRAModules, kvasir.LoRAModule{Name: fmt.Sprintf("adapter%d", i), Path: path})
		}
	})
	if err != nil {
		return err
	}
	defer e.Close()
	adapters := e.LoRAs()
	if len(adapters) != *k {
		return fmt.Errorf("bench lora: %d of %d adapters written", len(adapters), *k)
	}
	fmt.Fprintln(os.Stderr, e.KVCacheSizing())
	ctx := context.Background()
	reqs, err := bench.OfflineRequests(ctx, e, o, os.Stderr)
	if err != nil {
		return err
	}
	params := e.SamplingDefaults().Params()
	params.IgnoreEOS, params.Temperature = true, 0
	// A short warm-up, so that neither run pays for the first steps' allocations.
	bench.Offline(ctx, e, reqs[:min(2, len(reqs))], 0, params)
	loraReqs := slices.Clone(reqs)
	for i := range loraReqs {
		loraReqs[i].Adapter = adapters[i%len(adapters)]
	}
	res := loraBenchResult{Adapters: *k, Rank: *rank, Targets: *targets}
	// run runs the requests once, returning the result and the CPU ms per output token
	// (0 when CPU time is not read).
	run := func(rs []bench.OfflineRequest) (bench.OfflineResult, float64) {
		c0, ok0 := bench.ProcessCPU()
		r := bench.Offline(ctx, e, rs, 0, params)
		c1, ok1 := bench.ProcessCPU()
		if !ok0 || !ok1 || r.TotalOutputTokens == 0 {
			return r, 0
		}
		return r, float64((c1 - c0).Microseconds()) / 1e3 / float64(r.TotalOutputTokens)
	}
	for r := range *repeats {
		// Pairs alternate their order, so that a drift of the machine's speed weighs on
		// both sides alike.
		var base, withLoRA bench.OfflineResult
		var baseCPU, loraCPU float64
		if r%2 == 0 {
			base, baseCPU = run(reqs)
			withLoRA, loraCPU = run(loraReqs)
		} else {
			withLoRA, loraCPU = run(loraReqs)
			base, baseCPU = run(reqs)
		}
		res.Base, res.LoRA = append(res.Base, base), append(res.LoRA, withLoRA)
		if base.OutputThroughput > 0 {
			res.Ratios = append(res.Ratios, withLoRA.OutputThroughput/base.OutputThroughput)
		}
		if baseCPU > 0 && loraCPU > 0 {
			res.BaseCPUms, res.LoRACPUms = append(res.BaseCPUms, baseCPU), append(res.LoRACPUms, loraCPU)
			res.CPURatios = append(res.CPURatios, baseCPU/loraCPU)
		}
	}
	res.Ratio, res.CPURatio = median(res.Ratios), median(res.CPURatios)
	if *asJSON {
		return printJSON(res)
	}
	names := make([]string, len(adapters))
	for i, a := range adapters {
		names[i] = a.Name
	}
	fmt.Printf("adapters: %d of rank %d (%s: %s), requests spread round robin\n", *k, *rank, *targets, strings.Join(names, ","))
	for i := range res.Base {
		b, l := res.Base[i], res.LoRA[i]
		fmt.Printf("pair %d: base %d requests (%d failed) %.1f output tok/s, TPOT %.2f ms; lora %d requests (%d failed) %.1f output tok/s, TPOT %.2f ms; ratio %.3f\n",
			i+1, b.Completed, b.Failed, b.OutputThroughput, b.MeanTPOTms, l.Completed, l.Failed, l.OutputThroughput, l.MeanTPOTms, l.OutputThroughput/max(b.OutputThroughput, 1e-9))
		if i < len(res.CPURatios) {
			fmt.Printf("        CPU per output token: base %.2f ms, lora %.2f ms; ratio %.3f\n", res.BaseCPUms[i], res.LoRACPUms[i], res.CPURatios[i])
		}
	}
	fmt.Printf("ratio: %.3f of the base's output throughput (median of %d pairs)\n", res.Ratio, len(res.Ratios))
	if len(res.CPURatios) > 0 {
		fmt.Printf("cpu ratio: %.3f (the base's CPU time per output token over the adapters', median of %d pairs)\n", res.CPURatio, len(res.CPURatios))
	}
	return nil
}
