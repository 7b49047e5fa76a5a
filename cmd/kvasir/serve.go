package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/energy"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/server"
	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
)

func init() {
	register(command{name: "serve", summary: "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)", run: runServe})
}

func runServe(args []string) error {
	fs := newFlags("serve", "[MODEL | -m MODEL] [--host H] [--port P] [flags]")
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
	port := fs.Int("port", 8000, "port to listen on (0: any free port)")
	apiKey := fs.String("api-key", "", "require this key as \"Authorization: Bearer KEY\" (default: the environment variable KVASIR_API_KEY, read when the flag is not given)")
	served := fs.String("served-model-name", "", "comma-separated names the model is served under (default: the model's name)")
	chatTemplate := fs.String("chat-template", "", "a Jinja chat template file overriding the model's")
	toolParser := fs.String("tool-call-parser", "", "the tool-call syntax chat replies are parsed in: "+strings.Join(toolcall.Names(), ", ")+" (default: detected from the chat template)")
	ef := addEngineFlags(fs, allEngineFlags)
	tf := addChatTemplateFlags(fs)
	maxBody := new(int64)
	bytesVar(fs, maxBody, "max-request-bytes", server.DefaultMaxBodyBytes, "largest request body accepted (larger: 413)")
	drain := fs.Duration("drain-timeout", server.DefaultDrainTimeout, "on SIGTERM/SIGINT, how long requests in flight may finish before they are aborted (a second signal exits at once)")
	cf := addConnFlags(fs)
	noAccessLog := fs.Bool("disable-access-log", false, "log no line per request (vLLM: --disable-uvicorn-access-log)")
	statsInterval := fs.Duration("stats-interval", server.DefaultStatsInterval, "how often to log the stats line: throughput, running and waiting requests, KV cache usage, prefix cache hit rate (0: never)")
	noStats := fs.Bool("disable-log-stats", false, "log no stats line (vLLM's flag; the same as --stats-interval 0)")
	limits := addLimitFlags(fs)
	compressionModel := fs.String("compression-model", "", "a small model that requests' prompt_compression may name (by its model name, which the log shows) to score prompt tokens; without it the served model scores")
	rf := addRoleFlags(fs)
	pooling := fs.String("pooling", "", "pooling of an embedding model: mean, cls or last (default: the model's, from GGUF pooling_type or 1_Pooling/config.json); on a decoder, last serves its last token's final hidden state on /v1/embeddings")
	if err := ef.parse(fs, args); err != nil {
		return err
	}
	envDefault(fs, "api-key", "KVASIR_API_KEY", apiKey)
	if err := rf.check(); err != nil {
		return err
	}
	cfg := server.Config{APIKey: *apiKey, MaxBodyBytes: *maxBody, Limits: *limits, ToolCallParser: *toolParser,
		AccessLog: !*noAccessLog, StatsInterval: *statsInterval}
	if *noStats {
		cfg.StatsInterval = 0
	}
	if err := cf.apply(&cfg); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (give one model: first, or after -m)", fs.Arg(0))
	}
	tmplLimits, tmplWorkers, err := tf.limits()
	if err != nil {
		return err
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
	// The port is taken before the model loads, so that a busy one fails at once rather
	// than after minutes of loading; connections wait in the backlog meanwhile.
	ln, err := listen(*host, *port)
	if err != nil {
		return err
	}
	defer ln.Close()
	if path, ok := embedderPath(ef.model, *pooling); ok {
		cfg.Logger = log
		dev, err := kvasir.ParseDevice(ef.device)
		if err != nil {
			return fmt.Errorf("--device: %w", err)
		}
		kvMem, err := kvasir.ParseBytes(ef.kvMemory)
		if err != nil {
			return fmt.Errorf("--kv-cache-memory: %w", err)
		}
		// A decoder's pooling engine takes the engine's budget, sequences, cache and
		// prefix caching flags; an encoder the budget alone (its forwards' tokens).
		opt := kvasir.EmbedderOptions{Pooling: *pooling, Threads: ef.threads, Device: dev, MaxBatchTokens: ef.maxBatched,
			MaxNumSeqs: ef.maxNumSeqs, KVCacheMemory: kvMem, GPUMemoryUtilization: ef.gpuMem, DisablePrefixCaching: ef.noPrefixCaching}
		return serveEmbedder(path, *served, opt, ln, *drain, cfg, log)
	}
	if *pooling != "" {
		return fmt.Errorf("--pooling %s: %s is not an embedding model on disk (an encoder, or a decoder's GGUF file or Hugging Face folder)", *pooling, ef.model)
	}
	start := time.Now()
	var names []string
	var metrics *server.Metrics
	kvEvents := server.NewKVEvents(0) // served on /v1/kv_events, for kvasir router
	eng, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		names = servedNames(*served, fm.Name())
		metrics = server.NewMetrics(names[0])
		metrics.Hook(opt)
		opt.OnKVEvent = kvEvents.Record
		opt.KVPoolLog = log
	})
	if err != nil {
		return err
	}
	log.Info("engine ready", "model", eng.ModelName(), "max_model_len", eng.MaxModelLen(), "load", time.Since(start).Round(time.Millisecond))
	log.Info(eng.KVCacheSizing())
	if eng.LoRAEnabled() {
		var names []string
		for _, a := range eng.LoRAs() {
			names = append(names, fmt.Sprintf("%s (rank %d, %s)", a.Name, a.Rank, a.TargetNames()))
		}
		log.Info("lora", "max_loras", eng.MaxLoRAs(), "max_lora_rank", eng.MaxLoRARank(), "adapters", strings.Join(names, "; "))
	}
	if line := speculationLine(eng); line != "" {
		log.Info(line)
	}
	log.Info("default sampling parameters: "+eng.SamplingDefaults().String(), "generation_config", ef.generationConfig)
	meter := energy.Open()
	defer meter.Close()
	if err := metrics.AddEnergy(meter); err != nil {
		return err
	}
	if err := metrics.AddKVPool(eng); err != nil {
		return err
	}
	if ef.kvPool != "" || ef.kvOffload != "" {
		log.Info("kv pool: blocks beyond the KV cache", "redis", redactedURL(ef.kvPool), "offload_memory", ef.kvOffload)
	}
	if !meter.Available() {
		log.Info("energy: not measurable here, no kvasir:energy_joules_total", "reason", meter.Unavailable())
	}
	cfg.ModelNames, cfg.ChatTemplate, cfg.Logger, cfg.Metrics = names, tmplSrc, log, metrics
	cfg.ChatTemplateLimits, cfg.ChatTemplateWorkers = tmplLimits, tmplWorkers
	cfg.KVEvents = kvEvents
	if cfg.CompressionModels, err = openCompressionModels(*compressionModel, ef.device, ef.threads); err != nil {
		eng.Close()
		return err
	}
	for name, e := range cfg.CompressionModels {
		log.Info("prompt compression model", "name", name, "max_model_len", e.MaxModelLen())
		defer e.Close()
	}
	stopRole, err := rf.apply(&cfg, eng, *host, log, metrics)
	if err != nil {
		eng.Close()
		return err
	}
	defer stopRole()
	srv, err := server.New(eng, cfg)
	if err != nil {
		eng.Close()
		return err
	}
	if p := srv.ToolCallParser(); p != "" {
		log.Info("tool calls", "parser", p, "detected", *toolParser == "")
	} else {
		log.Info("tool calls: the chat template shows no tool-call syntax kvasir knows; requests with tools need --tool-call-parser (or tool_choice none)")
	}
	log.Info("connections", "max_connections", cfg.MaxConnections, "header_timeout", cfg.HeaderTimeout, "body_timeout", cfg.BodyTimeout,
		"write_timeout", cfg.WriteTimeout, "allowed_hosts", cfg.AllowedHosts, "allowed_origins", cfg.AllowedOrigins)
	if ef.model == "" {
		log.Warn("serving the built-in default model: RANDOM weights, gibberish output; serve a real model with -m model.gguf, -m ./hf-folder or -m hf:ORG/REPO")
	}
	// The address line is parsed by tests and scripts that start the server on port 0.
	fmt.Fprintf(os.Stderr, "kvasir: serving %s on http://%s/v1 (Ctrl-C to stop)\n", names[0], ln.Addr())
	log.Info(fmt.Sprintf("chat page: http://%s/", ln.Addr()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go onSignals(sigs, done, cancel, os.Exit, log)
	err = srv.Serve(ctx, ln, *drain)
	log.Info("server stopped")
	return err
}

// servedNames returns the comma-separated names of --served-model-name, or the model's
// own name when there are none.
func servedNames(flagValue, modelName string) []string {
	names := commaList(flagValue)
	if len(names) == 0 {
		names = []string{modelName}
	}
	return names
}

// onSignals drains the server (drain) on the first SIGTERM or SIGINT, and on the second
// exits at once, as vLLM does, so that a drain that takes too long can be cut short (exit
// gets 128 + the signal's number, as a shell reports a process a signal killed). It
// returns when done closes.
func onSignals(sigs <-chan os.Signal, done <-chan struct{}, drain func(), exit func(int), log *slog.Logger) {
	select {
	case <-done:
		return
	case sig := <-sigs:
		log.Info("signal received: draining the requests in flight; send it again to exit at once", "signal", sig)
		drain()
	}
	select {
	case <-done:
	case sig := <-sigs:
		log.Warn("second signal: exiting at once, the requests in flight are lost", "signal", sig)
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		exit(code)
	}
}

// envDefault sets *v, the value of flag name of the parsed fs, to the environment variable
// env when the flag was not given. Read after parsing, a secret there never shows in the
// help as the flag's default would.
func envDefault(fs *flag.FlagSet, name, env string, v *string) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if !given {
		*v = os.Getenv(env)
	}
}

// listen takes the address to serve on, with an error that says what to do when the port is
// busy or the address is not this machine's.
func listen(host string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("port %d on %s is already in use (another kvasir or server?): stop it, or pick another with --port (--port 0: any free port)", port, host)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("listen on %s: permission denied (ports below 1024 need privileges): pick another with --port", addr)
	}
	return nil, fmt.Errorf("listen on %s: %w (check --host)", addr, err)
}

// serveEmbedder serves an embedding model (an encoder, or a decoder's last-token
// embeddings) on ln: /v1/embeddings, /v1/rerank and /v1/score.
func serveEmbedder(path, served string, opt kvasir.EmbedderOptions, ln net.Listener, drain time.Duration, cfg server.Config, log *slog.Logger) error {
	start := time.Now()
	emb, err := kvasir.OpenEmbedder(path, opt)
	if err != nil {
		return err
	}
	defer emb.Close()
	log.Info("embedding model ready", "model", emb.ModelName(), "device", opt.Device, "dim", emb.Dim(), "max_len", emb.MaxLen(), "pooling", emb.Pooling(),
		"cross_encoder", emb.HasClassifier(), "load", time.Since(start).Round(time.Millisecond))
	cfg.ModelNames = servedNames(served, emb.ModelName())
	cfg.Metrics, cfg.Embedder = server.NewMetrics(cfg.ModelNames[0]), emb
	srv, err := server.New(nil, cfg)
	if err != nil {
		return err
	}
	// The address line is parsed by tests and scripts that start the server on port 0.
	fmt.Fprintf(os.Stderr, "kvasir: serving %s on http://%s/v1 (Ctrl-C to stop)\n", cfg.ModelNames[0], ln.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go onSignals(sigs, done, cancel, os.Exit, log)
	err = srv.Serve(ctx, ln, drain)
	log.Info("server stopped")
	return err
}

// embedderPath returns the local path of the model ref names and whether it is served as
// an embedding model (an hf: reference is downloaded first, as the engine would): an
// encoder, or a decoder given --pooling or whose metadata names a pooling (Qwen3-Embedding
// style, last token).
func embedderPath(ref, pooling string) (string, bool) {
	if ref == "" || strings.HasPrefix(ref, "synth:") {
		return "", false
	}
	path, err := kvasir.ResolveRef(ref, os.Stderr)
	if err != nil {
		return "", false // the engine reports it
	}
	if kvasir.IsEncoderModel(path) {
		return path, true
	}
	return path, pooling != "" || kvasir.DecoderPooling(path) != ""
}

// redactedURL is url with its password, if any, replaced by "xxxxx", for logs.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Redacted()
}
