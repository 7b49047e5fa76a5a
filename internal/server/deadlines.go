package server

import (
	"errors"
	"net/http"
	"os"
	"time"
)

// The defaults of a connection's deadlines (Config.HeaderTimeout, BodyTimeout,
// IdleTimeout, WriteTimeout).
const (
	DefaultHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout   = 60 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultWriteTimeout  = 30 * time.Second
)

// deadlines gives every request a body-read deadline (BodyTimeout from the request's
// start, lifted once the body has been read to its end, so that a long generation is not
// cut off by it) and every write a write deadline (WriteTimeout from that write: a stream's
// deadline is renewed with each chunk, so a client that stops reading is cut off within one
// WriteTimeout, and so is the final flush of a response). It also bounds the body at
// MaxBodyBytes: the reader sits on the server's own ResponseWriter, which then closes the
// connection rather than read the rest of an oversized body.
func (s *Server) deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
		// A deadline left from the connection's previous response must not cut this one.
		dw.renew()
		if r.Body != nil && r.Body != http.NoBody {
			// net/http lifts the deadline itself when the body has been read to its end,
			// as it starts watching the connection for the client going away. Errors are
			// ignored: a ResponseWriter without deadlines (a test recorder) has none.
			dw.rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
			// A shallow copy, so that the server still sees its own body type.
			r = r.WithContext(r.Context())
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		}
		next.ServeHTTP(dw, r)
	})
}

// deadlineWriter renews the connection's write deadline before each write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController // of the wrapped ResponseWriter
	timeout time.Duration
}

func (d *deadlineWriter) renew() { d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

// WriteHeader sends the status under a fresh write deadline (the headers may go out only
// when the handler returns).
func (d *deadlineWriter) WriteHeader(code int) {
	d.renew()
	d.ResponseWriter.WriteHeader(code)
}

// Write writes b under a fresh write deadline.
func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.renew()
	return d.ResponseWriter.Write(b)
}

// FlushError flushes under a fresh write deadline (http.ResponseController calls it).
func (d *deadlineWriter) FlushError() error {
	d.renew()
	return d.rc.Flush()
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
