package server

import (
	"encoding/json"
	"net/http"
)

// sseWriter writes server-sent events as OpenAI streams them: "data: {json}\n\n" per
// chunk, flushed at once, and "data: [DONE]\n\n" at the end.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error // the first write error (the client went away)
}

// newSSE starts an event stream response.
func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// send writes one data event holding v as JSON; it reports whether the stream is still
// writable.
func (s *sseWriter) send(v any) bool {
	if s.err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorBody{internalError(err)})
	}
	return s.raw(b)
}

// raw writes one data event with the given payload.
func (s *sseWriter) raw(payload []byte) bool {
	if s.err != nil {
		return false
	}
	buf := make([]byte, 0, len(payload)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		s.err = err
		return false
	}
	s.flush()
	return s.err == nil
}

func (s *sseWriter) flush() {
	if err := s.rc.Flush(); err != nil && s.err == nil {
		s.err = err
	}
}

// fail sends an error event (an error after the stream has started).
func (s *sseWriter) fail(e *APIError) bool { return s.send(errorBody{e}) }

// done ends the stream with [DONE].
func (s *sseWriter) done() { s.raw([]byte("[DONE]")) }
