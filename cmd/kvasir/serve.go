package main

import (
	"context"
	"flag"
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
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/server"
	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
)

func init() {
	register(command{name: "serve", summary: "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)", run: runServe})
}

func runServe(args []string) error {
	fs := newFlags("serve", "[-m MODEL] [--host H] [--port P] [flags]")
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
	port := fs.Int("port", 8000, "port to listen on (0: any free port)")
	apiKey := fs.String("api-key", "", "require this key as \"Authorization: Bearer KEY\" (default: the environment variable KVASIR_API_KEY, read when the flag is not given)")
	served := fs.String("served-model-name", "", "comma-separated names the model is served under (default: the model's name)")
	chatTemplate := fs.String("chat-template", "", "a Jinja chat template file overriding the model's")
	toolParser := fs.String("tool-call-parser", "", "the tool-call syntax chat replies are parsed in: "+strings.Join(toolcall.Names(), ", ")+" (default: detected from the chat template)")
	ef := addEngineFlags(fs, allEngineFlags)
	tf := addChatTemplateFlags(fs)
	maxBody := fs.Int64("max-request-bytes", server.DefaultMaxBodyBytes, "largest request body accepted (larger: 413)")
	drain := fs.Duration("drain-timeout", server.DefaultDrainTimeout, "on SIGTERM/SIGINT, how long requests in flight may finish before they are aborted (a second signal exits at once)")
	cf := addConnFlags(fs)
	limits := addLimitFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	envDefault(fs, "api-key", "KVASIR_API_KEY", apiKey)
	cfg := server.Config{APIKey: *apiKey, MaxBodyBytes: *maxBody, Limits: *limits, ToolCallParser: *toolParser}
	if err := cf.apply(&cfg); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (the model goes after -m)", fs.Arg(0))
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

	start := time.Now()
	var names []string
	var metrics *server.Metrics
	kvEvents := server.NewKVEvents(0) // served on /v1/kv_events, for kvasir router
	eng, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		names = servedNames(*served, fm.Name())
		metrics = server.NewMetrics(names[0])
		opt.OnRequestDone = metrics.OnRequestDone
		opt.OnKVEvent = kvEvents.Record
	})
	if err != nil {
		return err
	}
	log.Info("engine ready", "model", eng.ModelName(), "max_model_len", eng.MaxModelLen(), "load", time.Since(start).Round(time.Millisecond))
	log.Info(eng.KVCacheSizing())
	if line := speculationLine(eng); line != "" {
		log.Info(line)
	}
	log.Info("default sampling parameters: "+eng.SamplingDefaults().String(), "generation_config", ef.generationConfig)
	cfg.ModelNames, cfg.ChatTemplate, cfg.Logger, cfg.Metrics = names, tmplSrc, log, metrics
	cfg.ChatTemplateLimits, cfg.ChatTemplateWorkers = tmplLimits, tmplWorkers
	cfg.KVEvents = kvEvents
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
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		eng.Close()
		return err
	}
	if ef.model == "" {
		log.Warn("serving the built-in default model: RANDOM weights, gibberish output; serve a real model with -m model.gguf, -m ./hf-folder or -m hf:ORG/REPO")
	}
	// The address line is parsed by tests and scripts that start the server on port 0.
	fmt.Fprintf(os.Stderr, "kvasir: serving %s on http://%s/v1 (Ctrl-C to stop)\n", names[0], ln.Addr())
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
