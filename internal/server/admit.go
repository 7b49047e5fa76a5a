package server

import (
	"net/http"

	"github.com/kvasir-llm/kvasir"
)

// generatePaths are the endpoints that submit requests to the engine.
var generatePaths = map[string]bool{"/v1/completions": true, "/v1/chat/completions": true}

// admit refuses, from the headers alone and before the body is read, a POST that could
// only fail: a Content-Length over Config.MaxBodyBytes (413), or a generation while the
// engine's waiting queue is full (429).
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
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return tooLarge(s.cfg.MaxBodyBytes)
	}
	if generatePaths[r.URL.Path] && s.eng.QueueFull() {
		return engineError(kvasir.ErrQueueFull, "")
	}
	return nil
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
