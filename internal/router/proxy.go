package router

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

func (r *Router) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", r.handleGenerate(false))
	mux.HandleFunc("POST /v1/chat/completions", r.handleGenerate(true))
	mux.HandleFunc("GET /v1/models", r.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", r.handleModels)
	mux.HandleFunc("GET /health", r.handleHealth)
	mux.Handle("GET /metrics", r.metrics.handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no such endpoint on the router: %s %s", req.Method, req.URL.Path))
	})
	r.handler = r.authenticate(mux)
}

// authenticate requires Config.APIKey on /v1/*.
func (r *Router) authenticate(next http.Handler) http.Handler {
	if r.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + r.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/v1/") && subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), want) != 1 {
			writeError(w, http.StatusUnauthorized, "authentication_error", "missing or incorrect API key: send Authorization: Bearer KEY")
			return
		}
		next.ServeHTTP(w, req)
	})
}

// writeError answers an error in OpenAI's shape.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
}

// handleHealth answers 200 while some backend is healthy, else 503.
func (r *Router) handleHealth(w http.ResponseWriter, req *http.Request) {
	for _, b := range r.backends {
		if b.healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
	}
	writeError(w, http.StatusServiceUnavailable, "service_unavailable_error", "no healthy backend")
}

// handleModels passes GET /v1/models (and /v1/models/NAME) to a healthy backend.
func (r *Router) handleModels(w http.ResponseWriter, req *http.Request) {
	tried := map[*backend]bool{}
	for {
		b := r.anyLive(tried)
		if b == nil {
			writeError(w, http.StatusServiceUnavailable, "service_unavailable_error", "no healthy backend")
			return
		}
		tried[b] = true
		out, err := http.NewRequestWithContext(req.Context(), http.MethodGet, b.endpoint(req.URL.Path), nil)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
			return
		}
		r.backendAuth(out, req.Header)
		res, err := r.client.Do(out)
		if err != nil {
			b.markDown()
			continue
		}
		body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
		res.Body.Close()
		if err != nil {
			continue
		}
		copyHeaders(w.Header(), res.Header)
		w.WriteHeader(res.StatusCode)
		w.Write(body)
		return
	}
}

// anyLive returns a healthy backend not in exclude, in turn, or nil.
func (r *Router) anyLive(exclude map[*backend]bool) *backend {
	r.mu.Lock()
	start := r.rr
	r.rr++
	r.mu.Unlock()
	for i := range r.backends {
		b := r.backends[(start+i)%len(r.backends)]
		if b.healthy.Load() && !exclude[b] {
			return b
		}
	}
	return nil
}

// backendAuth sets the Authorization header of a request to a backend: BackendAPIKey, or
// the client's header (from, when not nil).
func (r *Router) backendAuth(out *http.Request, from http.Header) {
	switch {
	case r.cfg.BackendAPIKey != "":
		out.Header.Set("Authorization", "Bearer "+r.cfg.BackendAPIKey)
	case from != nil && from.Get("Authorization") != "":
		out.Header.Set("Authorization", from.Get("Authorization"))
	}
}

// copyHeaders copies a backend's response headers, but those of the connection.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Transfer-Encoding", "Content-Length", "Keep-Alive":
			continue
		}
		dst[k] = vs
	}
}

// requestHead are the fields of a generation request the router reads.
type requestHead struct {
	Stream         bool            `json:"stream"`
	User           string          `json:"user"`
	N              *int            `json:"n"`
	BestOf         *int            `json:"best_of"`
	Echo           bool            `json:"echo"`
	UseBeamSearch  bool            `json:"use_beam_search"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	Tools          json.RawMessage `json:"tools"`
	Logprobs       json.RawMessage `json:"logprobs"`
}

// continuable reports whether a stream of this request can be continued on another
// backend from the tokens already sent: one choice, no echo, beam search, tools or
// logprobs.
func (h *requestHead) continuable() bool {
	null := func(raw json.RawMessage) bool {
		s := strings.TrimSpace(string(raw))
		return s == "" || s == "null" || s == "false" || s == "[]"
	}
	one := func(p *int) bool { return p == nil || *p == 1 }
	return h.Stream && one(h.N) && one(h.BestOf) && !h.Echo && !h.UseBeamSearch && null(h.Tools) && null(h.Logprobs)
}

// retryable reports whether a backend's status means another backend may succeed.
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// handleGenerate proxies POST /v1/completions or /v1/chat/completions.
func (r *Router) handleGenerate(chat bool) http.HandlerFunc {
	path := "/v1/completions"
	if chat {
		path = "/v1/chat/completions"
	}
	return func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request body is over %d bytes", r.cfg.MaxBodyBytes))
				return
			}
			writeError(w, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
			return
		}
		var head requestHead
		json.Unmarshal(body, &head) // a body that does not parse gets the backend's error
		ctx := req.Context()
		t := target{session: req.Header.Get(SessionHeader)}
		if t.session == "" {
			t.session = head.User
		}
		var prompt *promptInfo
		if r.cfg.Policy == PolicyCacheAware || len(r.prefills) > 0 {
			prompt = r.promptInfo(ctx, chat, body, nil, req.Header)
			if prompt != nil {
				t.hashes = prompt.hashes
			}
		}
		var st *stream
		send := body
		if head.continuable() {
			st = &stream{chat: chat, stripIDs: !head.ReturnTokenIDs, body: body, prompt: prompt}
			if st.stripIDs {
				if send, err = withFields(body, map[string]any{"return_token_ids": true}); err != nil {
					st, send = nil, body
				}
			}
		}
		tried := map[*backend]bool{}
		b, res, msg := r.attempt(ctx, t, tried, path, send, req.Header)
		if b == nil {
			if ctx.Err() == nil {
				r.metrics.noBackend.Inc()
				writeError(w, http.StatusServiceUnavailable, "service_unavailable_error", "no backend could take the request: "+msg)
			}
			return
		}
		defer b.inflight.Add(-1)
		r.metrics.requests.WithLabelValues(b.name, strconv.Itoa(res.StatusCode)).Inc()
		if !head.Stream || res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			defer res.Body.Close()
			copyHeaders(w.Header(), res.Header)
			w.WriteHeader(res.StatusCode)
			io.Copy(w, res.Body)
			return
		}
		copyHeaders(w.Header(), res.Header)
		w.WriteHeader(http.StatusOK)
		flush(w)
		err = r.relay(w, res.Body, st, nil)
		res.Body.Close()
		if err == nil || ctx.Err() != nil {
			return
		}
		r.log.Warn("stream lost its backend", "backend", b.name, "err", err)
		b.markDown()
		r.continueStream(ctx, w, st, t, tried, b, req.Header)
	}
}

// attempt sends body to path on backends picked for t, one after another, until one
// answers with a status that is not retryable, marking the backends it tried. It returns
// that backend (its in-flight count raised) and response, or nil and why none answered.
func (r *Router) attempt(ctx context.Context, t target, tried map[*backend]bool, path string, body []byte, h http.Header) (*backend, *http.Response, string) {
	last := "no healthy backend"
	for ctx.Err() == nil {
		b, reason := r.pick(t, tried)
		if b == nil {
			return nil, nil, last
		}
		tried[b] = true
		r.metrics.decisions.WithLabelValues(reason).Inc()
		b.inflight.Add(1)
		var res *http.Response
		var err error
		if id := r.prefill(ctx, b, path, body, h, t.hashes); id != "" {
			hdr := h.Clone()
			hdr.Set(transferHeader, id)
			res, err = r.postHeaders(ctx, b, path, body, hdr, transferHeader)
		} else {
			res, err = r.post(ctx, b, path, body, h)
		}
		if err == nil && !retryable(res.StatusCode) {
			return b, res, ""
		}
		b.inflight.Add(-1)
		if err != nil {
			last = fmt.Sprintf("%s: %v", b.name, err)
			if ctx.Err() == nil {
				b.markDown()
			}
		} else {
			last = fmt.Sprintf("%s: status %d", b.name, res.StatusCode)
			io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
			res.Body.Close()
			r.metrics.requests.WithLabelValues(b.name, strconv.Itoa(res.StatusCode)).Inc()
		}
		if ctx.Err() == nil {
			r.metrics.retries.WithLabelValues(b.name).Inc()
			r.log.Warn("backend failed before the first byte; retrying on another", "backend", b.name, "why", last)
		}
	}
	return nil, nil, last
}

// post sends a JSON body to path on b. A non-streamed response is read whole here, so
// that a backend failing half-way through one still counts as failing before the first
// byte (and the request is retried).
func (r *Router) post(ctx context.Context, b *backend, path string, body []byte, h http.Header) (*http.Response, error) {
	return r.postHeaders(ctx, b, path, body, h)
}

// postHeaders is post passing on the headers named in pass too.
func (r *Router) postHeaders(ctx context.Context, b *backend, path string, body []byte, h http.Header, pass ...string) (*http.Response, error) {
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, b.endpoint(path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header.Set("Content-Type", "application/json")
	for _, k := range append(pass, "X-Request-Id") {
		if v := h.Get(k); v != "" {
			out.Header.Set(k, v)
		}
	}
	r.backendAuth(out, h)
	res, err := r.client.Do(out)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, nil
	}
	whole, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	res.Body = io.NopCloser(bytes.NewReader(whole))
	return res, nil
}

// flush sends what w holds to the client.
func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// promptInfo is what one backend says of a request's prompt: its token ids and block
// hashes.
type promptInfo struct {
	tokenIDs []int32
	hashes   []string
}

// promptHashTimeout bounds the wait for a backend to hash a prompt.
const promptHashTimeout = 5 * time.Second

// promptInfo asks a healthy backend not in exclude for the tokens and block hashes of the
// request's (single) prompt; nil when none answers, or the request has several prompts.
func (r *Router) promptInfo(ctx context.Context, chat bool, body []byte, exclude map[*backend]bool, h http.Header) *promptInfo {
	path := "/v1/kv_hashes/completions"
	if chat {
		path = "/v1/kv_hashes/chat/completions"
	}
	ctx, cancel := context.WithTimeout(ctx, promptHashTimeout)
	defer cancel()
	b := r.anyLive(exclude)
	if b == nil {
		return nil
	}
	res, err := r.post(ctx, b, path, body, h)
	if err != nil {
		r.log.Debug("prompt hashes", "backend", b.name, "err", err)
		return nil
	}
	defer res.Body.Close()
	var out struct {
		Prompts []struct {
			TokenIDs []int32  `json:"token_ids"`
			Hashes   []string `json:"hashes"`
		} `json:"prompts"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&out) != nil || len(out.Prompts) != 1 {
		return nil
	}
	return &promptInfo{tokenIDs: out.Prompts[0].TokenIDs, hashes: out.Prompts[0].Hashes}
}

// withFields returns the JSON object body with fields set.
func withFields(body []byte, fields map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	for k, v := range fields {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		m[k] = raw
	}
	return json.Marshal(m)
}
