package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/encoder"
)

func init() {
	registerBench(benchmark{name: "embed", summary: "embedding model throughput: batched forwards against one input at a time, or a decoder's prefix caching off against on over inputs of a shared prefix", run: benchEmbed})
}

// embedBenchResult is what `kvasir bench embed` reports (also as JSON with --json).
type embedBenchResult struct {
	Model      string  `json:"model"`
	Device     string  `json:"device"`
	Threads    int     `json:"threads"`
	Inputs     int     `json:"inputs"`
	InputLen   int     `json:"input_len"`
	Batched    float64 `json:"batched_inputs_per_s"`
	BatchedTok float64 `json:"batched_tokens_per_s"`
	Single     float64 `json:"single_inputs_per_s"`
	Speedup    float64 `json:"batching_speedup"`
}

// benchEmbed times one Embed call of every input (run in forwards of up to
// MaxBatchTokens tokens) against the same inputs embedded one call at a time, on random
// token ids framed by [CLS] and [SEP].
func benchEmbed(args []string) error {
	fs := newFlags("bench embed", "(-m MODEL | --shape S) [--pooling P] [--num-inputs N] [--input-len L] [--shared-prefix P [--repeats R]] [--threads T] [--device D] [--json]")
	model := fs.String("m", "", "an embedding model: an encoder (a bert GGUF or a BertModel folder) or a decoder with --pooling or pooling metadata")
	pooling := fs.String("pooling", "", "pooling: mean, cls or last (default: the model's)")
	prefix := fs.Int("shared-prefix", 0, "tokens every input starts with (a decoder: runs prefix caching off and on, alternately)")
	repeats := fs.Int("repeats", 2, "with --shared-prefix: pairs of runs (off, on), each pair on inputs of a prefix of its own")
	shape := fs.String("shape", "", "or a synthesized encoder shape: "+strings.Join(encoder.SynthShapes(), ", "))
	n := fs.Int("num-inputs", 64, "inputs per run")
	length := fs.Int("input-len", 128, "tokens per input, [CLS] and [SEP] included")
	threads := fs.Int("threads", 0, "CPU worker threads (0: all cores)")
	device := fs.String("device", "cpu", "cpu or cuda[:N]")
	batch := fs.Int("max-batch-tokens", kvasir.DefaultEmbedBatchTokens, "tokens per forward")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*model == "") == (*shape == "") || *n < 1 || *length < 2 || *prefix < 0 || *prefix >= *length || *repeats < 1 {
		fs.Usage()
		return fmt.Errorf("need one of -m or --shape, --num-inputs >= 1, --input-len >= 2, 0 <= --shared-prefix < --input-len and --repeats >= 1")
	}
	path := *model
	if *shape != "" {
		c, ok := encoder.SynthConfig(*shape)
		if !ok {
			return fmt.Errorf("unknown encoder shape %q (known: %s)", *shape, strings.Join(encoder.SynthShapes(), ", "))
		}
		dir, err := os.MkdirTemp("", "kvasir-bench-embed-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, *shape+".gguf")
		if err := encoder.WriteSynth(path, *shape, c, 1); err != nil {
			return err
		}
	}
	dev, err := kvasir.ParseDevice(*device)
	if err != nil {
		return fmt.Errorf("--device: %w", err)
	}
	opt := kvasir.EmbedderOptions{Pooling: *pooling, Threads: *threads, Device: dev, MaxBatchTokens: *batch}
	if *prefix > 0 {
		return benchEmbedPrefix(path, opt, *n, *length, *prefix, *repeats, *asJSON)
	}
	e, err := kvasir.OpenEmbedder(path, opt)
	if err != nil {
		return err
	}
	defer e.Close()
	if *length > e.MaxLen() {
		return fmt.Errorf("--input-len %d: the model takes at most %d", *length, e.MaxLen())
	}
	r := rand.New(rand.NewPCG(1, 2))
	inputs := make([]kvasir.EmbedInput, *n)
	for i := range inputs {
		toks := make([]int32, *length)
		for j := range toks {
			toks[j] = int32(5 + r.IntN(e.VocabSize()-5))
		}
		toks[0], toks[len(toks)-1] = 2, 3
		inputs[i].Tokens = toks
	}
	ctx := context.Background()
	if _, err := e.Embed(ctx, inputs[:1]); err != nil { // warm-up
		return err
	}
	start := time.Now()
	if _, err := e.Embed(ctx, inputs); err != nil {
		return err
	}
	batched := time.Since(start)
	start = time.Now()
	for i := range inputs {
		if _, err := e.Embed(ctx, inputs[i:i+1]); err != nil {
			return err
		}
	}
	single := time.Since(start)
	t := *threads
	if t < 1 {
		t = runtime.NumCPU()
	}
	res := embedBenchResult{Model: e.ModelName(), Device: dev.String(), Threads: t, Inputs: *n, InputLen: *length,
		Batched: float64(*n) / batched.Seconds(), BatchedTok: float64(*n**length) / batched.Seconds(),
		Single: float64(*n) / single.Seconds(), Speedup: single.Seconds() / batched.Seconds()}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("model %s on %s (%d threads), %d inputs of %d tokens\n", res.Model, res.Device, res.Threads, res.Inputs, res.InputLen)
	fmt.Printf("batched:           %8.1f inputs/s  %9.0f tokens/s\n", res.Batched, res.BatchedTok)
	fmt.Printf("one at a time:     %8.1f inputs/s\n", res.Single)
	fmt.Printf("batching speedup:  %8.2fx\n", res.Speedup)
	return nil
}

// embedPrefixResult is what `kvasir bench embed --shared-prefix` reports.
type embedPrefixResult struct {
	Model        string `json:"model"`
	Device       string `json:"device"`
	Threads      int    `json:"threads"`
	Pooling      string `json:"pooling"`
	Inputs       int    `json:"inputs"`
	InputLen     int    `json:"input_len"`
	SharedPrefix int    `json:"shared_prefix"`
	// Off and On are each run's inputs/s with prefix caching off and on, in the order
	// they ran (off, on, off, on, ...); Speedup is the median of the pairs' ratios.
	Off     []float64 `json:"prefix_caching_off_inputs_per_s"`
	On      []float64 `json:"prefix_caching_on_inputs_per_s"`
	Speedup float64   `json:"prefix_caching_speedup"`
}

// benchEmbedPrefix times one Embed call of n inputs of length tokens whose first prefix
// tokens are the same, on a decoder with prefix caching off and on, the two alternating
// (off, on) for repeats pairs; each pair embeds inputs of a prefix of its own, so that
// every "on" run computes its prefix once and no run finds another's.
func benchEmbedPrefix(path string, opt kvasir.EmbedderOptions, n, length, prefix, repeats int, asJSON bool) error {
	if kvasir.IsEncoderModel(path) {
		return fmt.Errorf("--shared-prefix: %s is an encoder, which has no KV cache to share a prefix through", path)
	}
	var es [2]*kvasir.Embedder // prefix caching off, on
	for i := range es {
		o := opt
		o.DisablePrefixCaching = i == 0
		e, err := kvasir.OpenEmbedder(path, o)
		if err != nil {
			return err
		}
		defer e.Close()
		es[i] = e
	}
	e := es[1]
	if length > e.MaxLen() {
		return fmt.Errorf("--input-len %d: the model takes at most %d", length, e.MaxLen())
	}
	ctx := context.Background()
	for _, e := range es { // warm-up
		if _, err := e.Embed(ctx, []kvasir.EmbedInput{{Tokens: []int32{1, 2, 3}}}); err != nil {
			return err
		}
	}
	res := embedPrefixResult{Model: e.ModelName(), Device: opt.Device.String(), Threads: opt.Threads, Pooling: e.Pooling(),
		Inputs: n, InputLen: length, SharedPrefix: prefix}
	if res.Threads < 1 {
		res.Threads = runtime.NumCPU()
	}
	var ratios []float64
	for p := range repeats {
		r := rand.New(rand.NewPCG(uint64(p)+1, 2))
		head := make([]int32, prefix)
		for j := range head {
			head[j] = int32(r.IntN(e.VocabSize()))
		}
		inputs := make([]kvasir.EmbedInput, n)
		for i := range inputs {
			toks := append(make([]int32, 0, length), head...)
			for len(toks) < length {
				toks = append(toks, int32(r.IntN(e.VocabSize())))
			}
			inputs[i].Tokens = toks
		}
		var rate [2]float64
		for i, e := range es {
			start := time.Now()
			if _, err := e.Embed(ctx, inputs); err != nil {
				return err
			}
			rate[i] = float64(n) / time.Since(start).Seconds()
		}
		res.Off, res.On = append(res.Off, rate[0]), append(res.On, rate[1])
		ratios = append(ratios, rate[1]/rate[0])
	}
	slices.Sort(ratios)
	res.Speedup = ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		res.Speedup = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("model %s on %s (%d threads), pooling %s, %d inputs of %d tokens sharing the first %d\n", res.Model, res.Device, res.Threads, res.Pooling, n, length, prefix)
	for i := range res.Off {
		fmt.Printf("pair %d: prefix caching off %8.2f inputs/s, on %8.2f inputs/s (%.2fx)\n", i+1, res.Off[i], res.On[i], res.On[i]/res.Off[i])
	}
	fmt.Printf("prefix caching speedup (median): %.2fx\n", res.Speedup)
	return nil
}
