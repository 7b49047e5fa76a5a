package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/encoder"
)

func init() {
	registerBench(benchmark{name: "embed", summary: "encoder (embedding model) throughput: batched forwards against one input at a time", run: benchEmbed})
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
	fs := newFlags("bench embed", "(-m MODEL | --shape S) [--num-inputs N] [--input-len L] [--threads T] [--device D] [--json]")
	model := fs.String("m", "", "an encoder model: a bert GGUF or a BertModel folder")
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
	if (*model == "") == (*shape == "") || *n < 1 || *length < 2 {
		fs.Usage()
		return fmt.Errorf("need one of -m or --shape, --num-inputs >= 1 and --input-len >= 2")
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
	e, err := kvasir.OpenEmbedder(path, kvasir.EmbedderOptions{Threads: *threads, Device: dev, MaxBatchTokens: *batch})
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
