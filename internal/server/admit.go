package server

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/kvasir-llm/kvasir"
)

// jsonPaths are the endpoints whose request body is JSON.
var jsonPaths = map[string]bool{"/v1/completions": true, "/v1/chat/completions": true, "/v1/responses": true, "/tokenize": true, "/detokenize": true,
	"/api/generate": true, "/api/chat": true, "/api/show": true, "/completion": true,
	"/v1/kv_hashes/completions": true, "/v1/kv_hashes/chat/completions": true,
	"/v1/kv_prefill/completions": true, "/v1/kv_prefill/chat/completions": true}

// generatePaths are the endpoints that submit requests to the engine.
var generatePaths = map[string]bool{"/v1/completions": true, "/v1/chat/completions": true, "/v1/responses": true,
	"/api/generate": true, "/api/chat": true, "/completion": true,
	"/v1/kv_prefill/completions": true, "/v1/kv_prefill/chat/completions": true}

// admit refuses, from the headers alone and before the body is read, a POST that could
// only fail: a body that is not JSON (415), a Content-Length over Config.MaxBodyBytes
// (413), or a generation while the engine's waiting queue is full (429).
func (s *Server) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if apiErr := s.admission(r); apiErr != nil {
				refuseEarly(w, r, apiErr)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// admission is the error admit answers r with, or nil.
func (s *Server) admission(r *http.Request) *APIError {
	if ct := r.Header.Get("Content-Type"); (jsonPaths[r.URL.Path] || embeddingPaths[r.URL.Path]) && !isJSONContentType(ct) {
		return &APIError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
			Message: fmt.Sprintf("the Content-Type %.100q is not accepted: send the request body as JSON, with Content-Type: application/json", ct)}
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return tooLarge(s.cfg.MaxBodyBytes)
	}
	if generatePaths[r.URL.Path] && s.eng != nil && s.eng.QueueFull() {
		return engineError(kvasir.ErrQueueFull, "")
	}
	return nil
}

// isJSONContentType reports whether a Content-Type header announces JSON: application/json
// with any parameters (a charset, say), or no header at all, as curl --data-binary without
// -H and Python's requests with a string body send, and as vLLM accepts. The types a web
// page may POST without a CORS preflight (text/plain, forms) are not JSON.
func isJSONContentType(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return (err == nil || err == mime.ErrInvalidMediaParameter) && mt == "application/json"
}

// refuseEarly answers e before the request's body is read. A request that has a body gets
// "Connection: close", and its connection is closed once the answer is out, without waiting
// for a body that may never come or reading one that is not wanted.
func refuseEarly(w http.ResponseWriter, r *http.Request, e *APIError) {
	if r.ContentLength == 0 {
		writeError(w, e)
		return
	}
	w.Header().Set("Connection", "close")
	writeError(w, e)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	// Where the connection can be taken over (HTTP/1), close it here; otherwise the
	// server closes it after the handler, as Connection: close asks.
	if conn, _, err := rc.Hijack(); err == nil {
		lingerClose(conn, lingerTime)
	}
}
