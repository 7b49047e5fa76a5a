// Package router is kvasir's cache-aware front door: an OpenAI-compatible proxy in front of
// several kvasir serve instances that sends each request to the instance already holding
// the longest part of its prompt in its prefix cache, weighed against load and session
// affinity.
//
// The router never tokenizes. Each instance publishes the chained hashes of the blocks that
// enter and leave its prefix cache (GET /v1/kv_events), and the router keeps a mirror of
// every instance's cached set. For a request, one instance hashes the prompt exactly as it
// would run it (POST /v1/kv_hashes/...), and the router counts, per instance, how many of
// the leading hashes that instance holds. docs/ROUTER.md describes the design and its
// limits.
//
// Faults: instances are health-checked, a request that fails before its first byte is
// retried on another instance, and a stream that loses its instance mid-way is continued
// on another from the tokens already sent (see continue.go).
//
// Disaggregation: with Config.Prefill the backends are decode instances, and each request's
// prompt is first computed on a prefill instance, which transfers its KV blocks to the
// decode instance chosen for the request (see disagg.go and docs/KV_TRANSFER.md).
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// The routing policies.
const (
	// PolicyCacheAware picks the instance holding the longest cached prefix of the prompt,
	// unless it is much busier than the least loaded one; without a cached prefix, the
	// session's instance; else the least loaded.
	PolicyCacheAware = "cache_aware"
	// PolicyRoundRobin takes the healthy instances in turn.
	PolicyRoundRobin = "round_robin"
	// PolicyLeastLoad picks the instance with the fewest requests.
	PolicyLeastLoad = "least_load"
	// PolicyRandom picks a healthy instance uniformly at random.
	PolicyRandom = "random"
)

// Policies lists the routing policies.
var Policies = []string{PolicyCacheAware, PolicyRoundRobin, PolicyLeastLoad, PolicyRandom}

// Defaults of Config's zero fields.
const (
	DefaultPollInterval = 250 * time.Millisecond
	DefaultBalanceSlack = 4
	DefaultMaxBodyBytes = 32 << 20
	// DefaultPredictionTTL is how long a prefix the router sent to an instance counts as
	// held there before the instance's events confirm it.
	DefaultPredictionTTL = 30 * time.Second
)

// SessionHeader names a request's session when the body has no user field.
const SessionHeader = "X-Session-ID"

// Config configures a Router. Zero values pick defaults.
type Config struct {
	// Backends are the base URLs of the kvasir serve instances (http://host:port): with
	// Prefill, the decode instances.
	Backends []string
	// Prefill, when set, are the base URLs of prefill instances (kvasir serve --role
	// prefill): each request's prompt is computed on one of them and its KV transferred
	// to the decode instance (a Backends entry, started with --role decode) chosen for it
	// (see disagg.go).
	Prefill []string
	// PrefillTimeout bounds a prefill and its KV transfer (0: DefaultPrefillTimeout);
	// past it the decode instance computes the prompt.
	PrefillTimeout time.Duration
	// Policy is one of Policies ("": PolicyCacheAware).
	Policy string
	// APIKey, when set, is required of clients as "Authorization: Bearer KEY" on /v1/*.
	APIKey string
	// BackendAPIKey, when set, is sent to the instances as "Authorization: Bearer KEY";
	// otherwise a client's Authorization header is passed on as it came.
	BackendAPIKey string
	// PollInterval is how often each instance's health, metrics and cache events are read
	// (0: DefaultPollInterval).
	PollInterval time.Duration
	// BalanceSlack is how many more requests than the least loaded instance the holder of
	// a cached prefix (or a session's instance) may have and still be chosen (0:
	// DefaultBalanceSlack; negative: no slack).
	BalanceSlack int
	// MaxBodyBytes limits request bodies (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// PredictionTTL bounds how long a routed prefix counts as held before events confirm
	// it (0: DefaultPredictionTTL).
	PredictionTTL time.Duration
	// Transport carries the requests to the instances (nil: a fresh http.Transport).
	Transport http.RoundTripper
	// Logger receives warnings (nil: slog.Default()).
	Logger *slog.Logger
}

// Router is the front door. It is an http.Handler; Close stops its pollers.
type Router struct {
	cfg      Config
	log      *slog.Logger
	client   *http.Client
	backends []*backend
	prefills []*backend // prefill instances (disaggregation; none otherwise)
	metrics  *metrics
	sessions sessions
	handler  http.Handler

	mu  sync.Mutex // guards rr and rng
	rr  int
	rng *rand.Rand

	ctx    context.Context // ends when the router closes: stops the pollers
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New makes a router over cfg.Backends and starts polling them.
func New(cfg Config) (*Router, error) {
	if len(cfg.Backends) == 0 {
		return nil, errors.New("router: no backend: give at least one --backend URL")
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyCacheAware
	}
	if !slices.Contains(Policies, cfg.Policy) {
		return nil, fmt.Errorf("router: policy %q: want one of %s", cfg.Policy, strings.Join(Policies, ", "))
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.BalanceSlack == 0 {
		cfg.BalanceSlack = DefaultBalanceSlack
	}
	cfg.BalanceSlack = max(cfg.BalanceSlack, 0)
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.PrefillTimeout <= 0 {
		cfg.PrefillTimeout = DefaultPrefillTimeout
	}
	if cfg.PredictionTTL <= 0 {
		cfg.PredictionTTL = DefaultPredictionTTL
	}
	if cfg.Transport == nil {
		cfg.Transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	}
	r := &Router{cfg: cfg, log: cfg.Logger, client: &http.Client{Transport: cfg.Transport},
		rng:      rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x726f75746572)),
		sessions: sessions{m: make(map[string]*backend)}}
	if r.log == nil {
		r.log = slog.Default()
	}
	seen := map[string]bool{}
	parse := func(raw string) (*backend, error) {
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("router: backend %q: want http://host:port", raw)
		}
		if seen[u.String()] {
			return nil, fmt.Errorf("router: backend %s given twice", u)
		}
		seen[u.String()] = true
		return newBackend(u), nil
	}
	for _, raw := range cfg.Backends {
		b, err := parse(raw)
		if err != nil {
			return nil, err
		}
		r.backends = append(r.backends, b)
	}
	for _, raw := range cfg.Prefill {
		b, err := parse(raw)
		if err != nil {
			return nil, err
		}
		b.isPrefill = true
		r.prefills = append(r.prefills, b)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.metrics = newMetrics(r.backends)
	r.routes()
	for _, b := range append(slices.Clone(r.backends), r.prefills...) {
		r.wg.Add(1)
		go r.poll(b)
	}
	return r, nil
}

// Close stops polling the instances and closes idle connections to them. Requests in
// flight are not affected.
func (r *Router) Close() {
	r.cancel()
	r.wg.Wait()
	if t, ok := r.cfg.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// ServeHTTP answers one request.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.handler.ServeHTTP(w, req) }
