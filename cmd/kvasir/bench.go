package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
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

// probeBytes is the buffer the bandwidth probe streams: far beyond any last-level cache.
const probeBytes = 512 << 20

// kernelResult is one weight type's figures.
type kernelResult struct {
	Type          string  `json:"type"`
	WeightBytes   int     `json:"weight_bytes"`
	MatVecGBPerS  float64 `json:"matvec_gb_per_s"`
	MatVecRatio   float64 `json:"matvec_bandwidth_ratio"`
	GEMMGFLOPPerS float64 `json:"gemm_gflop_per_s"`
}

func benchKernels(args []string) error {
	fs := newFlags("bench kernels", "[--threads N] [--rows R --cols C] [--types f32,q8_0,...] [--json]")
	threads := fs.Int("threads", 0, "worker threads (0: all cores)")
	rows := fs.Int("rows", 8192, "weight rows")
	cols := fs.Int("cols", 4096, "weight columns (a multiple of 256)")
	tokens := fs.Int("tokens", 64, "tokens of the matrix-matrix (prefill) measurement")
	typeList := fs.String("types", "f32,f16,bf16,q8_0,q4_0,q4_k,q6_k", "weight types")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cols <= 0 || *cols%256 != 0 || *rows <= 0 || *tokens <= 0 {
		return fmt.Errorf("--rows %d --cols %d --tokens %d: need positive sizes, columns a multiple of 256", *rows, *cols, *tokens)
	}
	p := cpu.NewPool(*threads)
	defer p.Close()
	probe := cpu.ProbeBandwidth(p, probeBytes)
	var results []kernelResult
	for _, name := range strings.Split(*typeList, ",") {
		t, err := quant.ParseType(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		w, err := benchWeight(t, *rows, *cols)
		if err != nil {
			return err
		}
		x := make([]float32, *tokens**cols)
		for i := range x {
			x[i] = float32(i%97)/97 - 0.5
		}
		out := make([]float32, *tokens**rows)
		mv, err := timeMatMul(p, out, w, x, 1, 2*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		mm, err := timeMatMul(p, out, w, x, *tokens, 2*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		gbs := float64(len(w.Data)) / mv.Seconds() / 1e9
		results = append(results, kernelResult{
			Type: t.String(), WeightBytes: len(w.Data), MatVecGBPerS: gbs, MatVecRatio: gbs / probe,
			GEMMGFLOPPerS: 2 * float64(*rows) * float64(*cols) * float64(*tokens) / mm.Seconds() / 1e9,
		})
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"probe_gb_per_s": probe, "threads": p.Threads(), "kernel_set": p.KernelSet(),
			"rows": *rows, "cols": *cols, "gemm_tokens": *tokens, "kernels": results})
	}
	fmt.Printf("bandwidth probe: %.2f GB/s (%d threads, %s kernels)\n", probe, p.Threads(), p.KernelSet())
	fmt.Printf("%-6s %12s %14s %10s %16s\n", "type", "weight MB", "matvec GB/s", "of probe", fmt.Sprintf("GEMM x%d GFLOP/s", *tokens))
	for _, r := range results {
		fmt.Printf("%-6s %12.1f %14.2f %9.0f%% %16.1f\n", r.Type, float64(r.WeightBytes)/1e6, r.MatVecGBPerS, 100*r.MatVecRatio, r.GEMMGFLOPPerS)
	}
	return nil
}

// benchWeight makes a rows x cols weight of type t: a band of random rows quantized
// properly (valid scales), repeated to fill the matrix.
func benchWeight(t quant.Type, rows, cols int) (cpu.Weight, error) {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return cpu.Weight{}, err
	}
	const band = 16
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, band*cols)
	for i := range vals {
		vals[i] = float32(r.NormFloat64()) * 0.02
	}
	src := make([]byte, band*rb)
	if err := quant.Quantize(t, vals, src); err != nil {
		return cpu.Weight{}, fmt.Errorf("%s: %w", t, err)
	}
	data := make([]byte, rows*rb)
	for off := 0; off < len(data); off += len(src) {
		copy(data[off:], src)
	}
	return cpu.Weight{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

// timeMatMul runs MatMul for about budget (at least 3 times after a warm-up) and returns
// the best time of one call.
func timeMatMul(p *cpu.Pool, out []float32, w cpu.Weight, x []float32, n int, budget time.Duration) (time.Duration, error) {
	if err := cpu.MatMul(p, out, w, x, n); err != nil {
		return 0, err
	}
	best := time.Duration(1 << 62)
	start := time.Now()
	iters := 0
	for iters < 3 || time.Since(start) < budget {
		t0 := time.Now()
		if err := cpu.MatMul(p, out, w, x, n); err != nil {
			return 0, err
		}
		best = min(best, time.Since(t0))
		iters++
	}
	return best, nil
}

// generateResult is what `bench generate --json` prints.
type generateResult struct {
	Model               string  `json:"model"`
	Arch                string  `json:"arch"`
	Threads             int     `json:"threads"`
	KernelSet           string  `json:"kernel_set"`
	TensorParallel      int     `json:"tensor_parallel_size"`
	PipelineParallel    int     `json:"pipeline_parallel_size"`
	PromptLen           int     `json:"prompt_len"`
	GenLen              int     `json:"gen_len"`
	PrefillSeconds      float64 `json:"prefill_seconds"`
	PrefillTokensPerS   float64 `json:"prefill_tokens_per_s"`
	DecodeSeconds       float64 `json:"decode_seconds"`
	DecodeTokensPerS    float64 `json:"decode_tokens_per_s"`
	WeightBytesPerToken int64   `json:"weight_bytes_per_token"`
	KVBytesPerToken     int64   `json:"kv_bytes_read_per_token"`
	DecodeGBPerS        float64 `json:"decode_gb_per_s"`
	ProbeGBPerS         float64 `json:"probe_gb_per_s"`
	DecodeBWRatio       float64 `json:"decode_bandwidth_ratio"`
}

func benchGenerate(args []string) error {
	fs := newFlags("bench generate", "-m MODEL [--prompt-len L] [--gen-len N] [--threads T] [--json]")
	promptLen := fs.Int("prompt-len", 128, "prompt tokens to prefill")
	genLen := fs.Int("gen-len", 64, "tokens to decode")
	chunk := fs.Int("chunk", model.DefaultPrefillChunk, "prefill chunk size in tokens")
	asJSON := fs.Bool("json", false, "print one JSON object")
	ef := addEngineFlags(fs, loadFlags)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *promptLen <= 0 || *genLen <= 0 {
		return fmt.Errorf("--prompt-len %d --gen-len %d: need positive lengths", *promptLen, *genLen)
	}
	start := time.Now()
	l, err := ef.load()
	if err != nil {
		return err
	}
	defer l.Close()
	fm, m := l.File(), l.Model()
	c := m.Config()
	fmt.Fprintf(os.Stderr, "loaded %s (%s, %.1f MB of weights) in %v; probing memory bandwidth...\n",
		fm.Name(), c.Arch, float64(fm.Bytes())/1e6, time.Since(start).Round(time.Millisecond))
	probe := l.ProbeBandwidth(probeBytes)

	s, err := m.NewSession(*promptLen + *genLen)
	if err != nil {
		return err
	}
	s.Chunk = *chunk
	r := rand.New(rand.NewPCG(7, 11))
	prompt := make([]int32, *promptLen)
	for i := range prompt {
		prompt[i] = int32(r.IntN(c.VocabSize))
	}
	// Warm up with the measured shapes: page the weights in and wake the workers on the
	// CPU; on a device, let the first calls of each GEMM shape and kernel (library
	// heuristics, lazy module loads) and the capture of the decode graph happen here,
	// not inside the timed runs.
	logits, err := s.Prefill(prompt)
	if err != nil {
		return err
	}
	next := int32(sample.Greedy(logits))
	for range 3 {
		if next, err = s.StepGreedy(next); err != nil {
			return err
		}
	}
	s.Reset()

	t0 := time.Now()
	if logits, err = s.Prefill(prompt); err != nil {
		return err
	}
	prefill := time.Since(t0)
	t0 = time.Now()
	// Greedy decoding as kvasir run and the engine do it: a backend that picks the token on
	// the device copies back its id, not the logits.
	next = int32(sample.Greedy(logits))
	for i := 0; i < *genLen; i++ {
		if next, err = s.StepGreedy(next); err != nil {
			return err
		}
	}
	decode := time.Since(t0)
	// Probe again and keep the better figure: on a shared machine one probe can be unlucky.
	probe = max(probe, l.ProbeBandwidth(probeBytes))
	nt, kernels := l.Threads(), l.KernelSet()

	res := generateResult{
		Model: fm.Name(), Arch: c.Arch, Threads: nt, KernelSet: kernels,
		TensorParallel: m.Parallel().Tensor, PipelineParallel: m.Parallel().Pipeline,
		PromptLen: *promptLen, GenLen: *genLen,
		PrefillSeconds: prefill.Seconds(), PrefillTokensPerS: perSecond(*promptLen, prefill),
		DecodeSeconds: decode.Seconds(), DecodeTokensPerS: perSecond(*genLen, decode),
		WeightBytesPerToken: m.WeightBytesPerToken(),
		// Each decode step reads the whole cached context; on average the prompt plus half
		// of the generated tokens.
		KVBytesPerToken: m.KVBytesPerToken() * int64(*promptLen+*genLen/2),
		ProbeGBPerS:     probe,
	}
	res.DecodeGBPerS = float64(res.WeightBytesPerToken+res.KVBytesPerToken) * res.DecodeTokensPerS / 1e9
	if probe > 0 {
		res.DecodeBWRatio = res.DecodeGBPerS / probe
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("model:   %s (%s), %d threads, %s kernels%s\n", res.Model, res.Arch, res.Threads, res.KernelSet, splitInfo(l))
	fmt.Printf("prefill: %d tokens in %.3fs = %.1f tokens/s\n", res.PromptLen, res.PrefillSeconds, res.PrefillTokensPerS)
	fmt.Printf("decode:  %d tokens in %.3fs = %.2f tokens/s\n", res.GenLen, res.DecodeSeconds, res.DecodeTokensPerS)
	fmt.Printf("decode bandwidth: %.2f GB/s (%.1f MB weights + %.1f MB KV per token) = %.0f%% of the probe's %.2f GB/s\n",
		res.DecodeGBPerS, float64(res.WeightBytesPerToken)/1e6, float64(res.KVBytesPerToken)/1e6, 100*res.DecodeBWRatio, res.ProbeGBPerS)
	return nil
}
