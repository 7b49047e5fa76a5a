package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvasir-llm/kvasir/internal/router"
)

func init() {
	register(command{name: "router", summary: "cache-aware OpenAI-compatible front door for several kvasir serve instances", run: runRouter})
}

// urlList is a flag that may be given several times, each a URL or a comma-separated list.
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, ",") }

func (l *urlList) Set(v string) error {
	*l = append(*l, commaList(v)...)
	return nil
}

func runRouter(args []string) error {
	fs := newFlags("router", "--backend URL [--backend URL ...] [--host H] [--port P] [--policy P] [flags]")
	var backends, prefill, decode urlList
	fs.Var(&backends, "backend", "a kvasir serve instance (http://host:port); repeat the flag or separate URLs with commas")
	fs.Var(&prefill, "prefill", "a prefill instance (kvasir serve --role prefill): prefill/decode disaggregation, with --decode; repeat or separate with commas")
	fs.Var(&decode, "decode", "a decode instance (kvasir serve --role decode): prefill/decode disaggregation, with --prefill; repeat or separate with commas")
	prefillTimeout := fs.Duration("prefill-timeout", router.DefaultPrefillTimeout, "with --prefill: how long a prefill and its KV transfer may take before the decode instance computes the prompt itself")
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
	port := fs.Int("port", 8080, "port to listen on (0: any free port)")
	policy := fs.String("policy", router.PolicyCacheAware, "routing policy: "+strings.Join(router.Policies, ", "))
	apiKey := fs.String("api-key", "", "require this key of clients as \"Authorization: Bearer KEY\" (default: the environment variable KVASIR_API_KEY, read when the flag is not given)")
	backendKey := fs.String("backend-api-key", "", "send this key to the instances (default: pass the client's Authorization header on)")
	poll := fs.Duration("poll-interval", router.DefaultPollInterval, "how often each instance's /health, /metrics and /v1/kv_events are read")
	slack := fs.Int("balance-slack", router.DefaultBalanceSlack, "how many more requests than the least loaded instance a cache or session match may have and still win (-1: none)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM/SIGINT, how long requests in flight may finish")
	if err := parseFlags(fs, args, "balance-slack"); err != nil {
		return err
	}
	envDefault(fs, "api-key", "KVASIR_API_KEY", apiKey)
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (instances go after --backend)", fs.Arg(0))
	}
	switch {
	case len(prefill) > 0 && len(decode) == 0, len(decode) > 0 && len(prefill) == 0:
		return errors.New("--prefill and --decode go together: give both, or the instances of role both with --backend")
	case len(decode) > 0 && len(backends) > 0:
		return errors.New("--backend with --prefill/--decode: the decode instances take the requests; give them with --decode only")
	case len(decode) > 0:
		backends = decode
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	rt, err := router.New(router.Config{Backends: backends, Prefill: prefill, PrefillTimeout: *prefillTimeout, Policy: *policy, APIKey: *apiKey, BackendAPIKey: *backendKey,
		PollInterval: *poll, BalanceSlack: *slack, Logger: log})
	if err != nil {
		return err
	}
	defer rt.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	// The address line is parsed by tests and scripts that start the router on port 0.
	if len(prefill) > 0 {
		fmt.Fprintf(os.Stderr, "kvasir: disaggregated: %d prefill and %d decode instances\n", len(prefill), len(decode))
	}
	fmt.Fprintf(os.Stderr, "kvasir: routing %d backends (%s) on http://%s/v1 (Ctrl-C to stop)\n", len(backends), *policy, ln.Addr())
	srv := &http.Server{Handler: rt, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case sig := <-sigs:
		log.Info("signal received: draining", "signal", sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}
