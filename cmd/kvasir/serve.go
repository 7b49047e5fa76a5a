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
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/server"
)

func init() {
	register(command{name: "serve", summary: "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)", run: runServe})
}

func runServe(args []string) error {
	fs := newFlags("serve", "[-m MODEL] [--host H] [--port P] [flags]")
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
	port := fs.Int("port", 8000, "port to listen on (0: any free port)")
	apiKey := fs.String("api-key", os.Getenv("KVASIR_API_KEY"), "require this key as \"Authorization: Bearer KEY\" (default $KVASIR_API_KEY)")
	served := fs.String("served-model-name", "", "comma-separated names the model is served under (default: the model's name)")
	chatTemplate := fs.String("chat-template", "", "a Jinja chat template file overriding the model's")
	ef := addEngineFlags(fs, allEngineFlags)
	maxBody := fs.Int64("max-request-bytes", server.DefaultMaxBodyBytes, "largest request body accepted (larger: 413)")
	drain := fs.Duration("drain-timeout", server.DefaultDrainTimeout, "on SIGTERM/SIGINT, how long requests in flight may finish before they are aborted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (the model goes after -m)", fs.Arg(0))
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
	eng, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		names = servedNames(*served, fm.Name())
		metrics = server.NewMetrics(names[0])
		opt.OnRequestDone = metrics.OnRequestDone
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
	srv, err := server.New(eng, server.Config{
		ModelNames: names, APIKey: *apiKey, MaxBodyBytes: *maxBody, ChatTemplate: tmplSrc,
		Logger: log, Metrics: metrics,
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
	if ef.model == "" {
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

// servedNames returns the comma-separated names of --served-model-name, or the model's
// own name when there are none.
func servedNames(flagValue, modelName string) []string {
	var names []string
	for _, n := range strings.Split(flagValue, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		names = []string{modelName}
	}
	return names
}
