// Package server is kvasir's OpenAI-compatible HTTP API: /v1/completions,
// /v1/chat/completions (with server-sent-event streaming), /v1/models, vLLM's /tokenize and
// /detokenize, /health, /version and Prometheus /metrics, on top of a kvasir.Engine.
// Requests are validated here (errors in OpenAI's shape, naming the parameter), chat
// messages are rendered with the model's template, and a client that goes away aborts its
// request at once.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
	"github.com/kvasir-llm/kvasir/internal/structured/toolcall"
)

// Config configures a Server. Zero values pick defaults.
type Config struct {
	// ModelNames are the names the model is served under (the request's model field must
	// be one of them, or empty); the first is the one reported. Empty: the engine's
	// ModelName.
	ModelNames []string
	// APIKey, when set, is required as "Authorization: Bearer KEY" on /v1/*, /tokenize and
	// /detokenize.
	APIKey string
	// MaxBodyBytes limits request bodies (0: DefaultMaxBodyBytes); larger ones get 413.
	MaxBodyBytes int64
	// ChatTemplate overrides the model's chat template (Jinja source).
	ChatTemplate string
	// ChatTemplateLimits bound each render of the chat template, which runs in sandbox
	// worker processes (zero fields: chat's defaults). A template that cannot render a
	// one-message conversation within them makes New fail.
	ChatTemplateLimits chat.Limits
	// ChatTemplateWorkers is how many sandbox workers may render at once (0:
	// chat.DefaultWorkers).
	ChatTemplateWorkers int
	// Sampling are the sampling parameters of requests that leave them out (nil: the
	// engine's, Engine.SamplingDefaults).
	Sampling *kvasir.SamplingDefaults
	// Version is reported by /version.
	Version string
	// Logger receives warnings and errors (nil: slog.Default()).
	Logger *slog.Logger
	// Metrics is the registry served on /metrics; its Hook should have set the engine's
	// callbacks so that the histograms fill (nil: a fresh one without
	// latency histograms being fed).
	Metrics *Metrics

	// HeaderTimeout is how long a connection may take to send a request's headers, and
	// IdleTimeout how long a kept-alive connection may wait for its next request; both
	// are enforced by Serve (0: DefaultHeaderTimeout, DefaultIdleTimeout).
	HeaderTimeout, IdleTimeout time.Duration
	// BodyTimeout is how long a request's body may take to arrive from the start of the
	// request; a slower one gets 408 (0: DefaultBodyTimeout).
	BodyTimeout time.Duration
	// WriteTimeout is how long one write to a client may block: a response, or one chunk
	// of a stream; a client that reads none of it for so long is cut off and its request
	// aborted (0: DefaultWriteTimeout).
	WriteTimeout time.Duration
	// MaxStreamBuffer is how many bytes of a stream may wait for a client reading slower
	// than the engine writes; beyond it the client is cut off and its request aborted (0:
	// DefaultMaxStreamBuffer).
	MaxStreamBuffer int64
	// MaxConnections caps the connections Serve keeps open; one beyond the cap is
	// answered 503 and closed at once (0: DefaultMaxConnections()).
	MaxConnections int
	// AllowedHosts are the Host header values answered besides loopback names and the
	// listen address on a connection that arrives on a loopback address (and, when set,
	// on every connection): names or addresses, alone (any port) or with :port; "*" turns
	// the check off. A Host outside them gets 403 (DNS rebinding).
	AllowedHosts []string
	// AllowedOrigins are the origins (scheme://host[:port], "null", or "*" for all) whose
	// web pages may call the server; a request with another Origin header gets 403, an
	// allowed one CORS headers. Empty: no browser origin (kvasir serve's --allowed-origins
	// defaults to "*", as vLLM's).
	AllowedOrigins []string
	// AllowedMethods and AllowedHeaders are the methods and request headers a CORS
	// preflight may ask for (empty or "*": any, as vLLM's defaults).
	AllowedMethods, AllowedHeaders []string
	// ToolCallParser names the tool-call syntax chat replies are parsed in (a
	// toolcall.Names entry); empty: the one the chat template shows (toolcall.Detect), or
	// none, when requests with tools and tool_choice other than "none" are refused.
	ToolCallParser string
	// ToolGrammar, when set, makes the processors that hold a chat request with tools to
	// its tool_choice (a grammar built from the tools' schemas, in the Parser's syntax).
	// Without it tool_choice "required" and a named function are refused, and "auto" runs
	// unconstrained.
	ToolGrammar func(ToolChoice) ([]kvasir.Processor, error)
	// AccessLog logs a line per request (method, path, status, bytes, duration, client).
	AccessLog bool
	// StatsInterval is how often Serve logs a line of the engine's figures (throughput,
	// running and waiting sequences, KV cache usage, prefix cache hit rate), as vLLM does
	// every 10 s (0: never).
	StatsInterval time.Duration
	// Embedder, when set, serves /v1/embeddings, /v1/rerank and /v1/score with an
	// encoder model; without it they answer 400 (a generative model). The server may run
	// on an Embedder alone (New's eng nil): then the generation endpoints answer 400. The
	// caller closes the Embedder after the server.
	Embedder *kvasir.Embedder
	// KVEvents, when set, is the log of the engine's prefix-cache events (its Record must
	// be the engine's Options.OnKVEvent), served on GET /v1/kv_events for routers.
	KVEvents *KVEvents
	// CompressionModels are the small models a request's prompt_compression.model may
	// name besides the served model (kvasir serve --compression-model), by name. The
	// caller closes them after the server.
	CompressionModels map[string]*kvasir.Engine
	// Role is the instance's role in prefill/decode disaggregation: RoleBoth (""),
	// RolePrefill or RoleDecode (docs/KV_TRANSFER.md).
	Role string
	// KVReceiver, on a decode instance, holds the KV transfers received for the requests
	// that name them; KVTransferAddress is its address as prefill instances reach it
	// (host:port), published on GET /v1/kv_transfer.
	KVReceiver        *kvtransfer.Receiver
	KVTransferAddress string
	// KVSender, on a prefill instance, sends the transfers (nil: a kvtransfer.Sender with
	// its default timeout); KVPrefillChunk is how many prompt tokens it computes before it
	// sends their blocks, while the next ones compute (0: DefaultPrefillChunk; rounded down
	// to whole blocks).
	KVSender       *kvtransfer.Sender
	KVPrefillChunk int
	// KVStreamChunks, on a prefill instance, sends each chunk's blocks once the chunk is
	// computed instead of each layer's part as soon as the layer is computed (the only way
	// on an engine that does not stream layers; see kvasir.Engine.StreamsLayers).
	KVStreamChunks bool
	// Limits are the budgets of one request (zero fields: the defaults).
	Limits
}

// Server answers the HTTP API for one engine. It is an http.Handler.
type Server struct {
	eng     *kvasir.Engine
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	sandbox *chat.Sandbox  // where tmpl renders
	tmpl    *chat.Template // nil when there is no chat template
	tmplErr error          // why tmpl is nil
	// toolParser is the tool-call parser of chat replies ("": none).
	toolParser string
	// sampling are the defaults of the sampling fields a request leaves out.
	sampling kvasir.SamplingDefaults
	created  int64
	mux      *http.ServeMux
	handler  http.Handler
	// responses are the stored responses of /v1/responses.
	responses *responseStore

	hosts   hostPolicy
	origins originPolicy
	// corsMethods and corsHeaders are AllowedMethods and AllowedHeaders.
	corsMethods, corsHeaders allowList
	draining                 atomic.Bool
	// openConns counts the connections Serve holds open.
	openConns atomic.Int64
}

// New makes a server for eng, starting the chat template's sandbox (Close stops it). eng
// may be nil when cfg.Embedder is set: a server of an encoder model alone.
func New(eng *kvasir.Engine, cfg Config) (*Server, error) {
	if eng == nil {
		return newEmbeddingServer(cfg)
	}
	if len(cfg.ModelNames) == 0 {
		cfg.ModelNames = []string{eng.ModelName()}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Version == "" {
		cfg.Version = buildVersion()
	}
	setDefaults(&cfg)
	cfg.Limits = cfg.Limits.withDefaults(eng.MaxModelLen())
	hosts, origins, err := cfg.policies()
	if err != nil {
		return nil, err
	}
	if err := cfg.checkToolCallParser(); err != nil {
		return nil, err
	}
	s := &Server{eng: eng, cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, sampling: eng.SamplingDefaults(), created: time.Now().Unix(),
		hosts: hosts, origins: origins, corsMethods: newCORSList(cfg.AllowedMethods, true), corsHeaders: newCORSList(cfg.AllowedHeaders, false),
		responses: newResponseStore(ResponseStoreEntries, ResponseStoreBytes)}
	if cfg.Sampling != nil {
		s.sampling = *cfg.Sampling
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(cfg.ModelNames[0])
	}
	if err := s.metrics.attach(eng); err != nil {
		return nil, err
	}
	if s.role() != RoleBoth {
		if err := s.metrics.EnableTransfer(); err != nil {
			return nil, err
		}
	}
	if cfg.KVReceiver != nil {
		if err := s.metrics.attachReceiver(cfg.KVReceiver); err != nil {
			return nil, err
		}
	}
	if cfg.Embedder != nil {
		if err := s.metrics.attachEmbedder(cfg.Embedder); err != nil {
			return nil, err
		}
	}
	if err := s.loadChatTemplate(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// loadChatTemplate starts the sandbox and loads the chat template in it: a template that
// does not compile leaves chat answering 400 with the reason; one that cannot render a
// one-message conversation within the limits is an error.
func (s *Server) loadChatTemplate() error {
	sb, err := chat.NewSandbox(chat.SandboxConfig{Limits: s.cfg.ChatTemplateLimits, Workers: s.cfg.ChatTemplateWorkers})
	if err != nil {
		return err
	}
	s.sandbox = sb
	src := s.cfg.ChatTemplate
	if src == "" {
		src = s.eng.ChatTemplate()
	}
	if src == "" {
		s.tmplErr = fmt.Errorf("model %s has no chat template: use /v1/completions, or start the server with --chat-template", s.eng.ModelName())
		return nil
	}
	t, err := sb.Load(context.Background(), src)
	var ce *chat.CompileError
	var le *chat.LimitError
	switch {
	case errors.As(err, &ce):
		s.tmplErr = fmt.Errorf("the chat template does not compile: %w", err)
		s.log.Warn("chat template", "err", err)
	case errors.As(err, &le):
		sb.Close()
		return fmt.Errorf("%w (set by %s)", err, chatLimitFlags[le.Limit])
	case err != nil:
		sb.Close()
		return err
	default:
		s.tmpl = t
	}
	s.toolParser = s.cfg.ToolCallParser
	if s.toolParser == "" {
		s.toolParser = toolcall.Detect(src)
	}
	return nil
}

// ToolCallParser names the tool-call parser chat replies are read with ("": none).
func (s *Server) ToolCallParser() string { return s.toolParser }

// Close stops the chat template's sandbox workers; Serve calls it as it returns.
func (s *Server) Close() error {
	if s.sandbox == nil {
		return nil
	}
	return s.sandbox.Close()
}

// buildVersion is the main module's version from the build info.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Validate reports a Config that New would refuse (an allowed host or origin it cannot
// read, an unknown tool-call parser), so that a command can check its flags before loading
// a model.
func (c *Config) Validate() error {
	if _, _, err := c.policies(); err != nil {
		return err
	}
	return c.checkToolCallParser()
}

// checkToolCallParser reports a ToolCallParser that names no parser.
func (c *Config) checkToolCallParser() error {
	if c.ToolCallParser == "" {
		return nil
	}
	_, err := toolcall.New(c.ToolCallParser, toolcall.Options{})
	return err
}

// policies reads AllowedHosts and AllowedOrigins.
func (c *Config) policies() (hostPolicy, originPolicy, error) {
	hosts, err := newHostPolicy(c.AllowedHosts)
	if err != nil {
		return hosts, originPolicy{}, err
	}
	origins, err := newOriginPolicy(c.AllowedOrigins)
	return hosts, origins, err
}

// setDefaults fills the connection settings cfg leaves at zero.
func setDefaults(cfg *Config) {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.HeaderTimeout, DefaultHeaderTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout},
		{&cfg.BodyTimeout, DefaultBodyTimeout}, {&cfg.WriteTimeout, DefaultWriteTimeout}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if cfg.MaxStreamBuffer <= 0 {
		cfg.MaxStreamBuffer = DefaultMaxStreamBuffer
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections()
	}
}

// routes builds the handler chain: the access log, deadlines, recover, the browser checks (Host, Origin,
// CORS), authentication, the checks made from the headers alone, then the endpoints.
func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.Handle("/v1/models", method(http.MethodGet, s.handleModels))
	mux.Handle("/v1/models/{model...}", method(http.MethodGet, s.handleModel))
	mux.Handle("/v1/completions", method(http.MethodPost, s.handleCompletions))
	mux.Handle("/v1/chat/completions", method(http.MethodPost, s.handleChat))
	mux.Handle("/v1/responses", method(http.MethodPost, s.handleResponses))
	mux.Handle("/v1/responses/{id}", method(http.MethodGet, s.handleResponse))
	mux.Handle("/v1/kv_events", method(http.MethodGet, s.handleKVEvents))
	mux.Handle("/v1/load_lora_adapter", method(http.MethodPost, s.handleLoadLoRA))
	mux.Handle("/v1/unload_lora_adapter", method(http.MethodPost, s.handleUnloadLoRA))
	mux.Handle("/v1/kv_hashes/completions", method(http.MethodPost, s.handleKVHashes(false)))
	mux.Handle("/v1/kv_hashes/chat/completions", method(http.MethodPost, s.handleKVHashes(true)))
	mux.Handle("/tokenize", method(http.MethodPost, s.handleTokenize))
	mux.Handle("/detokenize", method(http.MethodPost, s.handleDetokenize))
	s.embeddingRoutes(mux)
	mux.Handle("/health", method(http.MethodGet, s.handleHealth))
	mux.Handle("/version", method(http.MethodGet, s.handleVersion))
	mux.Handle("/metrics", method(http.MethodGet, s.metrics.Handler().ServeHTTP))
	mux.Handle("/{$}", method(http.MethodGet, s.handleWebUI))
	s.kvTransferRoutes(mux)
	s.ollamaRoutes(mux)
	s.llamaRoutes(mux)
	mux.Handle("/openapi.json", method(http.MethodGet, s.handleOpenAPI))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("", "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	s.mux = mux
	s.handler = s.accessLog(s.deadlines(s.recoverPanics(s.browserChecks(s.authenticate(s.admit(s.generationGuard(s.withTransfer(mux))))))))
}

// ServeHTTP answers one HTTP request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// method restricts a handler to one HTTP method (GET also answers HEAD), answering 405
// in OpenAI's error shape otherwise.
func method(m string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, &APIError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: fmt.Sprintf("method %s not allowed on %s: use %s", r.Method, r.URL.Path, m)})
			return
		}
		h(w, r)
	})
}

// recoverPanics turns a handler panic into a logged 500, so that no input takes the server
// down.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil || p == http.ErrAbortHandler {
				if p != nil {
					panic(p)
				}
				return
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			writeError(w, internalError(fmt.Errorf("internal error: %v", p)))
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticate requires the API key on the API paths when one is configured, from the
// headers: a request without it is refused before its body is read.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/v1/") || p == "/tokenize" || p == "/detokenize" || isLlamaOrOllamaPath(p) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				msg := "missing API key: send Authorization: Bearer KEY"
				if len(got) > 0 {
					msg = "incorrect API key provided"
				}
				refuseEarly(w, r, &APIError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key", Message: msg})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkModel accepts an empty model, one of the served names or a loaded LoRA adapter.
func (s *Server) checkModel(name string) *APIError {
	_, apiErr := s.adapterOf(name)
	return apiErr
}

// modelName is the name responses report.
func (s *Server) modelName() string { return s.cfg.ModelNames[0] }

// warnUnknown logs the request fields the server ignores.
func (s *Server) warnUnknown(path string, fields map[string]json.RawMessage) {
	if len(fields) > 0 {
		s.log.Warn("ignoring unknown request fields", "path", path, "fields", slices.Sorted(maps.Keys(fields)))
	}
}

// newID returns a fresh response id with the given prefix.
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return prefix + fmt.Sprint(time.Now().UnixNano())
	}
	return prefix + hex.EncodeToString(b[:])
}

// modelCard is a model object of /v1/models.
type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	Parent      any    `json:"parent"`
	MaxModelLen int    `json:"max_model_len"`
}

func (s *Server) card(name string) modelCard {
	if s.eng == nil {
		return modelCard{ID: name, Object: "model", Created: s.created, OwnedBy: "kvasir", Root: s.cfg.Embedder.ModelName(), MaxModelLen: s.cfg.Embedder.MaxLen()}
	}
	return modelCard{ID: name, Object: "model", Created: s.created, OwnedBy: "kvasir", Root: s.eng.ModelName(), MaxModelLen: s.eng.MaxModelLen()}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	list := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list"}
	for _, n := range s.cfg.ModelNames {
		list.Data = append(list.Data, s.card(n))
	}
	list.Data = append(list.Data, s.loraCards()...)
	writeJSON(w, http.StatusOK, list)
}

// handleModel answers GET /v1/models/{model} (OpenAI's retrieve).
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if apiErr := s.checkModel(name); apiErr != nil || name == "" {
		if apiErr == nil {
			apiErr = notFound("model", "model_not_found", "give a model name")
		}
		writeError(w, apiErr)
		return
	}
	card := s.card(name)
	if a, _ := s.adapterOf(name); a != nil {
		card.Root, card.Parent = a.Path, s.modelName()
	}
	writeJSON(w, http.StatusOK, card)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, Type: "service_unavailable_error", Message: "the server is shutting down"})
		return
	}
	// llama-server's JSON; vLLM's clients read only the status.
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
}
