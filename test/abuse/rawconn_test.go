//go:build linux

package abuse

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// dialRaw opens a TCP connection to s; a receive buffer (SO_RCVBUF) of rcvbuf bytes when
// rcvbuf > 0, set before connecting so that the window the client offers stays small.
func dialRaw(s *server, rcvbuf int) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
			return errors.Join(err, serr)
		}
	}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", s.addr, err)
	}
	return c, nil
}

// requestHead is the head of a POST to path with a JSON body of length bytes (and the extra
// header lines, each ending in \r\n).
func requestHead(s *server, path string, length int, extra string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n", path, s.addr, length, extra)
}

// openConns opens n connections to s and writes first(i) on connection i.
func openConns(s *server, n, rcvbuf int, first func(i int) string) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := dialRaw(s, rcvbuf)
		if err == nil {
			_, err = io.WriteString(c, first(i))
		}
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// closeAll closes every connection.
func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// closedBy reads (and drops) what c receives until the server closes it, and reports
// whether that happened before deadline.
func closedBy(c net.Conn, deadline time.Time) bool {
	c.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// countOpen returns how many of conns the server has not closed by deadline, checking them
// all at once.
func countOpen(conns []net.Conn, deadline time.Time) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := 0
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !closedBy(c, deadline) {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return open
}

// readAnswer reads one response from c within d, with at most 64 KiB of its body.
func readAnswer(c net.Conn, d time.Duration) (answer, error) {
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return answer{took: time.Since(start)}, fmt.Errorf("no answer within %v: %w", d, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return answer{status: res.StatusCode, header: res.Header, close: res.Close, body: b, took: time.Since(start), err: err}, nil
}

// healthUnder probes /health n times, every gap, and returns the slowest answer.
func healthUnder(s *server, n int, gap time.Duration) (time.Duration, error) {
	var slowest time.Duration
	for range n {
		d, err := s.health()
		if err != nil {
			return 0, err
		}
		slowest = max(slowest, d)
		time.Sleep(gap)
	}
	return slowest, nil
}
