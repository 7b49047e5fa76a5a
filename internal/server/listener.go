package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// MaxDefaultConnections bounds DefaultMaxConnections, whatever the open-file limit.
const MaxDefaultConnections = 4096

// fdReserve is how many file descriptors DefaultMaxConnections leaves for everything but
// client connections: model files, logs, shared libraries, the listener.
const fdReserve = 128

// maxRefusing bounds the refused connections being answered at once; beyond it a refused
// connection is closed unanswered.
const maxRefusing = 64

// DefaultMaxConnections is the default of Config.MaxConnections: MaxDefaultConnections, or
// fewer where the process may open fewer files (RLIMIT_NOFILE less fdReserve, and at least
// half the limit), so that connections cannot take the descriptors the rest of the server
// needs.
func DefaultMaxConnections() int {
	n, ok := openFileLimit()
	if !ok {
		return MaxDefaultConnections
	}
	return maxConnectionsFor(n)
}

// maxConnectionsFor is DefaultMaxConnections under an open-file limit of n.
func maxConnectionsFor(n int) int {
	return max(1, min(MaxDefaultConnections, max(n-fdReserve, n/2)))
}

// connLimiter is a net.Listener that keeps at most max connections open: one beyond them is
// answered 503 and closed at once, not queued.
type connLimiter struct {
	net.Listener
	max      int64
	open     *atomic.Int64 // connections accepted and not yet closed
	refusing chan struct{} // a semaphore of maxRefusing: refusals being answered
	refusal  []byte        // the 503 response
	log      *slog.Logger
	warned   atomic.Int64 // unix seconds of the last warning
}

// limitConnections wraps ln so that at most max connections are open at once, counted in
// open.
func limitConnections(ln net.Listener, max int, open *atomic.Int64, log *slog.Logger) *connLimiter {
	body, _ := json.Marshal(errorBody{&APIError{Status: http.StatusServiceUnavailable, Type: "service_unavailable_error", Code: "too_many_connections",
		Message: fmt.Sprintf("the server holds its limit of %d open connections (--max-connections); retry later", max)}})
	resp := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s", len(body), body)
	return &connLimiter{Listener: ln, max: int64(max), open: open, refusing: make(chan struct{}, maxRefusing), refusal: []byte(resp), log: log}
}

// Accept returns the next connection within the limit, refusing those beyond it.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &countedConn{Conn: c, open: l.open}, nil
		}
		l.open.Add(-1)
		l.refuse(c)
	}
}

// refuse answers c with the 503 and closes it, without holding up Accept.
func (l *connLimiter) refuse(c net.Conn) {
	if now := time.Now().Unix(); l.warned.Load() < now-10 && l.warned.Swap(now) < now-10 {
		l.log.Warn("refusing connections: the server holds --max-connections open", "max_connections", l.max)
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		c.SetWriteDeadline(time.Now().Add(lingerTime))
		if _, err := c.Write(l.refusal); err != nil {
			c.Close()
			return
		}
		lingerClose(c, lingerTime)
	}()
}

// lingerTime is how long lingerClose waits for a client to take its answer and close.
const lingerTime = 500 * time.Millisecond

// lingerClose closes a connection whose client may still be sending: closing with data
// unread would reset the connection, and the client could lose the answer written to it.
// So it ends the writing side, reads what the client sends (up to 256 KiB) until the client
// closes its side or d passes, waits out d if the client keeps sending, and closes.
func lingerClose(c net.Conn, d time.Duration) {
	defer c.Close()
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	deadline := time.Now().Add(d)
	c.SetReadDeadline(deadline)
	const most = 256 << 10
	if n, _ := io.Copy(io.Discard, io.LimitReader(c, most)); n == most {
		time.Sleep(time.Until(deadline))
	}
}

// countedConn is a connection of a connLimiter, uncounted when closed.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

// CloseWrite ends the writing side of a TCP connection.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection and frees its place.
func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.open.Add(-1) })
	return err
}
