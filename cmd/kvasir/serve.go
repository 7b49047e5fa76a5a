package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/server"
)

func init() {
	register(command{name: "serve", summary: "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)", run: runServe})
}

func runServe(args []string) error {
	fs := newFlags("serve", "[-m MODEL] [--host H] [--port P] [flags]")
	ref := fs.String("m", "", "model: a .gguf file, a llama2.c .bin, a Hugging Face folder, or hf:ORG/REPO[/FILE]; default: the built-in random-weight model")
	tokPath := fs.String("z", "", "tokenizer file (for a llama2.c checkpoint: tokenizer.bin)")
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
	port := fs.Int("port", 8000, "port to listen on (0: any free port)")
	apiKey := fs.String("api-key", os.Getenv("KVASIR_API_KEY"), "require this key as \"Authorization: Bearer KEY\" (default $KVASIR_API_KEY)")
	served := fs.String("served-model-name", "", "comma-separated names the model is served under (default: the model's name)")
	chatTemplate := fs.String("chat-template", "", "a Jinja chat template file overriding the model's")
	maxModelLen := fs.Int("max-model-len", 0, "most prompt plus output tokens per sequence (0: the model's context length, capped by the KV cache)")
	maxSeqs := fs.Int("max-num-seqs", 0, "most sequences running at once (0: 256)")
	maxBatched := fs.Int("max-num-batched-tokens", 0, "token budget of one engine step (0: 2048)")
	kvMem := fs.String("kv-cache-memory", "", "KV cache budget: bytes, or with a unit (512MiB, 2GiB, 1GB) (default: 1GiB, capped by need)")
	maxWaiting := fs.Int("max-waiting", 0, "answer 429 when this many requests wait (0: no limit)")
	threads := fs.Int("threads", 0, "CPU worker threads (0: all cores)")
	pl := placementFlags(fs)
	gpuMem := gpuMemoryFlag(fs)
	blockSize := fs.Int("block-size", 0, "tokens per KV block (0: 16)")
	noPrefix := fs.Bool("no-prefix-caching", false, "turn prefix caching off")
	noAsync := fs.Bool("no-async-scheduling", false, "turn asynchronous scheduling off (plan each step only after the previous one's outputs are out)")
	maxBody := fs.Int64("max-request-bytes", server.DefaultMaxBodyBytes, "largest request body accepted (larger: 413)")
	drain := fs.Duration("drain-timeout", server.DefaultDrainTimeout, "on SIGTERM/SIGINT, how long requests in flight may finish before they are aborted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (the model goes after -m)", fs.Arg(0))
	}
	kvBytes, err := parseBytes(*kvMem)
	if err != nil {
		return fmt.Errorf("--kv-cache-memory: %w", err)
	}
	var tmplSrc string
	if *chatTemplate != "" {
		b, err := os.ReadFile(*chatTemplate)
		if err != nil {
			return fmt.Errorf("--chat-template: %w", err)
		}
		tmplSrc = string(b)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	fm, err := openModel(*ref, *tokPath)
	if err != nil {
		return err
	}
	var names []string
	for _, n := range strings.Split(*served, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		names = []string{fm.Name()}
	}
	var bos, eos string
	if v := fm.Vocab; v != nil {
		if v.BOS >= 0 && v.BOS < len(v.Tokens) {
			bos = v.Tokens[v.BOS]
		}
		if v.EOS >= 0 && v.EOS < len(v.Tokens) {
			eos = v.Tokens[v.EOS]
		}
	}
	metrics := server.NewMetrics(names[0])
	start := time.Now()
	eng, bes, err := pl.engine(fm, kvasir.Options{
		Threads: *threads, KVCacheMemory: kvBytes, GPUMemoryUtilization: *gpuMem, BlockSize: *blockSize, MaxNumSeqs: *maxSeqs,
		MaxNumBatchedTokens: *maxBatched, MaxModelLen: *maxModelLen, DisablePrefixCaching: *noPrefix, DisableAsyncScheduling: *noAsync,
		MaxWaiting: *maxWaiting, OnRequestDone: metrics.OnRequestDone,
	})
	if err != nil {
		fm.Close()
		return err
	}
	defer closeBackends(bes)
	log.Info("engine ready", "model", eng.ModelName(), "max_model_len", eng.MaxModelLen(), "load", time.Since(start).Round(time.Millisecond))
	log.Info(eng.KVCacheSizing())
	srv, err := server.New(eng, server.Config{
		ModelNames: names, APIKey: *apiKey, MaxBodyBytes: *maxBody, ChatTemplate: tmplSrc,
		BOSToken: bos, EOSToken: eos, Logger: log, Metrics: metrics,
	})
	if err != nil {
		eng.Close()
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		eng.Close()
		return err
	}
	if *ref == "" {
		log.Warn("serving the built-in default model: RANDOM weights, gibberish output; serve a real model with -m model.gguf, -m ./hf-folder or -m hf:ORG/REPO")
	}
	// The address line is parsed by tests and scripts that start the server on port 0.
	fmt.Fprintf(os.Stderr, "kvasir: serving %s on http://%s/v1 (Ctrl-C to stop)\n", names[0], ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = srv.Serve(ctx, ln, *drain)
	log.Info("server stopped")
	return err
}

// parseBytes reads a size such as "1073741824", "512MiB", "2GiB", "1GB" or "64k"; "" is 0.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
	}
	lower := strings.ToLower(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(lower, u.suffix) {
			lower, mult = strings.TrimSpace(strings.TrimSuffix(lower, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(lower, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size (bytes, or with a unit such as 512MiB or 2GiB)", s)
	}
	return int64(v * float64(mult)), nil
}
