// Package redistest starts a real redis-server on a loopback port for a test and stops it
// when the test ends. Without a redis-server binary the test skips, unless
// KVASIR_REQUIRE_TESTDATA=1 (CI, whose .ci/run installs Debian's redis-server): then it
// fails.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// Server is a redis-server a test started.
type Server struct {
	// Addr is its host:port on the loopback interface.
	Addr string
	cmd  *exec.Cmd
	once sync.Once
	done chan struct{}
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// binary finds redis-server or ends the test.
func binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err == nil {
		return p
	}
	if testdata.Required() {
		t.Fatal("redis-server is required (KVASIR_REQUIRE_TESTDATA=1): install Debian's redis-server package")
	}
	t.Skip("no redis-server installed (apt-get install redis-server); skipping the Redis test")
	return ""
}

// Start runs a redis-server as the shared KV pool is meant to run (no persistence,
// allkeys-lru within maxmemory) on a free loopback port, waits until it answers, and
// stops it at the end of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru", "--protected-mode", "yes")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); close(s.done) }()
		if err := s.waitReady(5 * time.Second); err != nil {
			s.Kill()
			if attempt < 2 { // the port was taken between freePort and the server's bind
				continue
			}
			t.Fatalf("redis-server on %s: %v", s.Addr, err)
		}
		t.Cleanup(s.Kill)
		return s
	}
}

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitReady polls the server with PING until it answers PONG.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("exited before answering")
		default:
		}
		if reply, err := s.Do("PING"); err == nil && reply == "+PONG" {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v (last: %q, %v)", limit, reply, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Do sends one inline command (no argument may hold a space) and returns the first line
// of the reply: the test's own view of the server, independent of the client under test.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", strings.Join(args, " ")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// Kill ends the server at once (SIGKILL) and waits for it to exit. Killing it twice does
// nothing.
func (s *Server) Kill() {
	s.once.Do(func() {
		s.cmd.Process.Kill()
		<-s.done
	})
}
