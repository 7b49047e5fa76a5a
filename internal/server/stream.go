package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxStreamBuffer is the default of Config.MaxStreamBuffer: how many bytes of a
// stream may wait for a client that reads slower than the engine writes.
const DefaultMaxStreamBuffer = 256 << 10

// sseWriter writes server-sent events as OpenAI streams them: "data: {json}\n\n" per
// chunk and "data: [DONE]\n\n" at the end. The handler queues events without blocking; a
// goroutine of the writer's own writes them to the client and flushes, each write under
// the connection's write deadline (renewed per write by the deadlines middleware). A
// client that lets more than limit bytes pile up, or that stops reading for a whole write
// deadline, is cut off: send then reports false, the handler returns and the request's
// context ends, which aborts the request in the engine and frees its KV blocks.
type sseWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	limit int
	// prefix and suffix frame each payload: "data: " and a blank line for server-sent
	// events, nothing and a newline for NDJSON.
	prefix, suffix string

	mu      sync.Mutex
	pending []byte // events queued, not yet handed to the connection
	spare   []byte // the buffer the writer last wrote, reused for the next events
	err     error  // why the stream stopped (the client went away, stopped reading or fell behind)
	closed  bool   // no more events will be queued

	wake   chan struct{} // capacity 1: "something to write"
	exited chan struct{} // closed when the writing goroutine has returned
}

// newSSE starts an event stream response holding at most limit bytes (0:
// DefaultMaxStreamBuffer) of events the client has not taken yet. The caller must call
// close (done does) before the handler returns.
func newSSE(w http.ResponseWriter, limit int) *sseWriter {
	return newStream(w, limit, "text/event-stream; charset=utf-8", "data: ", "\n\n")
}

// newNDJSON starts a newline-delimited JSON stream (ollama's), one JSON object a line, with
// the flow control of newSSE.
func newNDJSON(w http.ResponseWriter, limit int) *sseWriter {
	return newStream(w, limit, "application/x-ndjson", "", "\n")
}

// newStream starts a stream of payloads framed by prefix and suffix.
func newStream(w http.ResponseWriter, limit int, contentType, prefix, suffix string) *sseWriter {
	if limit <= 0 {
		limit = DefaultMaxStreamBuffer
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), limit: limit, prefix: prefix, suffix: suffix,
		wake: make(chan struct{}, 1), exited: make(chan struct{})}
	s.err = s.rc.Flush()
	go s.writeLoop()
	return s
}

// send queues one data event holding v as JSON; it reports whether the stream is still
// writable.
func (s *sseWriter) send(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorBody{internalError(err)})
	}
	return s.raw("", b)
}

// sendEvent queues one event named name ("event: name" before its data line, as the
// Responses API streams) holding v as JSON.
func (s *sseWriter) sendEvent(name string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorBody{internalError(err)})
	}
	return s.raw(name, b)
}

// raw queues one data event with the given payload, named when name is not empty.
func (s *sseWriter) raw(name string, payload []byte) bool {
	s.mu.Lock()
	if s.err != nil || s.closed {
		s.mu.Unlock()
		return false
	}
	size := len(s.pending) + len(s.prefix) + len(payload) + len(s.suffix)
	if name != "" {
		size += len("event: \n") + len(name)
	}
	if size > s.limit {
		s.err = fmt.Errorf("the client fell %d bytes behind the stream (the limit is %d): cut off", size, s.limit)
		s.mu.Unlock()
		// End a write blocked on the client at once instead of at its deadline.
		s.rc.SetWriteDeadline(time.Now())
		return false
	}
	if name != "" {
		s.pending = append(s.pending, "event: "...)
		s.pending = append(s.pending, name...)
		s.pending = append(s.pending, '\n')
	}
	s.pending = append(s.pending, s.prefix...)
	s.pending = append(s.pending, payload...)
	s.pending = append(s.pending, s.suffix...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// writeLoop writes the queued events until the stream is closed and written, or a write
// fails.
func (s *sseWriter) writeLoop() {
	defer close(s.exited)
	for range s.wake {
		s.mu.Lock()
		buf, closed := s.pending, s.closed
		s.pending, s.spare = s.spare[:0], nil
		stopped := s.err != nil
		s.mu.Unlock()
		if stopped {
			return
		}
		if len(buf) > 0 {
			_, err := s.w.Write(buf)
			if err == nil {
				err = s.rc.Flush()
			}
			s.mu.Lock()
			if err != nil && s.err == nil {
				s.err = err
			}
			stopped = s.err != nil
			s.spare = buf[:0]
			s.mu.Unlock()
			if stopped {
				return
			}
		}
		if closed {
			return
		}
	}
}

// close ends the stream (queuing nothing more) and waits until what was queued is written,
// or the client is cut off; later calls return at once.
func (s *sseWriter) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.exited
}

// fail sends an error event (an error after the stream has started).
func (s *sseWriter) fail(e *APIError) bool { return s.send(errorBody{e}) }

// done ends the stream with [DONE] and waits for it to be written.
func (s *sseWriter) done() {
	s.raw("", []byte("[DONE]"))
	s.close()
}
