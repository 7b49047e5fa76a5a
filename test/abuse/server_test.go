//go:build linux

package abuse

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kvasirBin is the kvasir binary TestMain builds.
var kvasirBin string

// TestMain builds the kvasir binary once for every test of the suite.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvasir-abuse-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "abuse:", err)
		os.Exit(1)
	}
	kvasirBin = filepath.Join(dir, "kvasir")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", kvasirBin, "github.com/kvasir-llm/kvasir/cmd/kvasir")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "abuse: go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startTimeout bounds how long `kvasir serve` may take to print its address line.
const startTimeout = 60 * time.Second

// addressLine is the line `kvasir serve` prints once it listens (cmd/kvasir/serve.go).
var addressLine = regexp.MustCompile(`serving (\S+) on http://(\S+)/v1`)

// server is a `kvasir serve` on loopback: its flags and its current process.
type server struct {
	args  []string
	addr  string // host:port it listens on
	model string // the name it serves the model under
	*process
}

// process is one run of a server.
type process struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	// exited is closed when the process has exited; exitErr is then its Wait error, and
	// why says why the watchdog killed it ("" if it did not).
	exited  chan struct{}
	exitErr error
	why     string
}

// suiteFlags size every server of the suite for a 2-core machine: a small KV cache, and one
// engine thread, which leaves the other core to the HTTP side and to the suite's clients;
// and they allow one browser origin (serve allows every one by default, as vLLM), so that
// a foreign page's request is refused.
var suiteFlags = []string{"--kv-cache-memory", "64MiB", "--threads", "1", "--allowed-origins", "http://localhost:3000"}

// startServer starts `kvasir serve --host 127.0.0.1 --port 0 suiteFlags... args...` and waits
// for its address line. An error carries the server's output: a server that refuses its
// flags or its model exits before listening.
func startServer(args ...string) (*server, error) {
	full := append(append([]string{"serve", "--host", "127.0.0.1", "--port", "0"}, suiteFlags...), args...)
	p := &process{cmd: exec.Command(kvasirBin, full...), logs: &lockedBuffer{}, exited: make(chan struct{})}
	s := &server{args: args, process: p}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout = s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kvasir serve: %w", err)
	}
	stopWatch := make(chan struct{})
	killed := watchdog(s.cmd.Process.Pid, stopWatch)
	found := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			p.logs.Write([]byte(sc.Text() + "\n"))
			if m := addressLine.FindStringSubmatch(sc.Text()); m != nil && !seen {
				seen = true
				found <- [2]string{m[1], m[2]}
			}
		}
		io.Copy(io.Discard, stderr)
		p.exitErr = p.cmd.Wait()
		close(stopWatch)
		p.why = <-killed
		close(p.exited)
	}()
	select {
	case m := <-found:
		s.model, s.addr = m[0], m[1]
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("kvasir serve %s exited before listening (%v):\n%s", strings.Join(args, " "), s.exitErr, tail(s.logs.String(), 3000))
	case <-time.After(startTimeout):
		s.kill()
		return nil, fmt.Errorf("kvasir serve %s did not listen within %v:\n%s", strings.Join(args, " "), startTimeout, tail(s.logs.String(), 3000))
	}
}

// mustStart starts a server for the whole test t and stops it at t's end.
func mustStart(t *testing.T, args ...string) *server {
	t.Helper()
	s, err := startServer(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// pid is the server's process id.
func (s *server) pid() int { return s.cmd.Process.Pid }

// url is the server's address with path.
func (s *server) url(path string) string { return "http://" + s.addr + path }

// alive reports whether the process still runs; when it does not, the error says how it
// ended, with the end of its log.
func (s *server) alive() error {
	select {
	case <-s.exited:
		how := fmt.Sprint(s.exitErr)
		if s.why != "" {
			how = s.why
		}
		return fmt.Errorf("the server died (%s); its log ends:\n%s", how, tail(s.logs.String(), 3000))
	default:
		return nil
	}
}

// signal sends sig to the server.
func (s *server) signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// waitExit waits up to d for the process to exit and reports whether it did.
func (s *server) waitExit(d time.Duration) bool {
	select {
	case <-s.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// kill ends the process at once and waits for it.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// stop asks the server to drain and exit (SIGTERM), killing it if it has not within 10 s.
func (s *server) stop() {
	if s.alive() != nil {
		return
	}
	s.signal(syscall.SIGTERM)
	if !s.waitExit(10 * time.Second) {
		s.kill()
	}
}

// restart replaces the process by a fresh one with the same flags.
func (s *server) restart() error {
	s.kill()
	n, err := startServer(s.args...)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

// probe is the client of /health and /metrics: no keep-alive, so that it holds no
// connection (and no server goroutine) between calls.
var probe = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// health asks /health once and returns how long the answer took.
func (s *server) health() (time.Duration, error) {
	start := time.Now()
	res, err := probe.Get(s.url("/health"))
	if err != nil {
		return 0, fmt.Errorf("/health: %w", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/health: status %d", res.StatusCode)
	}
	return time.Since(start), nil
}

// metrics reads /metrics and returns each sample's value by its name with labels, such as
// `go_goroutines` or `kvasir:request_success_total{engine="0",finished_reason="abort",model_name="m"}`.
func (s *server) metrics() (map[string]float64, error) {
	res, err := probe.Get(s.url("/metrics"))
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: status %d", res.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// metric returns the one sample whose name (labels included) starts with prefix.
func metric(ms map[string]float64, prefix string) (float64, error) {
	found, v := 0, 0.0
	for k, x := range ms {
		if strings.HasPrefix(k, prefix) {
			found, v = found+1, x
		}
	}
	if found != 1 {
		return 0, fmt.Errorf("/metrics: %d samples named %s, want 1", found, prefix)
	}
	return v, nil
}

// idleState is what an idle server reports: goroutines, KV usage, requests running and
// waiting, and choices finished by abort.
type idleState struct {
	goroutines, kvUsage, running, waiting, aborted float64
}

// state reads the server's idleState from /metrics.
func (s *server) state() (idleState, error) {
	ms, err := s.metrics()
	if err != nil {
		return idleState{}, err
	}
	var st idleState
	for _, f := range []struct {
		dst    *float64
		prefix string
	}{
		{&st.goroutines, "go_goroutines"},
		{&st.kvUsage, "kvasir:kv_cache_usage_perc{"},
		{&st.running, "kvasir:num_requests_running{"},
		{&st.waiting, "kvasir:num_requests_waiting{"},
		{&st.aborted, `kvasir:request_success_total{engine="0",finished_reason="abort"`},
	} {
		if *f.dst, err = metric(ms, f.prefix); err != nil {
			return idleState{}, err
		}
	}
	return st, nil
}

// waitIdle polls /metrics until nothing runs or waits, the KV cache is empty and at most
// goroutines goroutines exist (no bound when goroutines < 0), and returns the state then;
// the error says what was still held at the deadline.
func (s *server) waitIdle(goroutines float64, within time.Duration) (idleState, error) {
	deadline := time.Now().Add(within)
	for {
		st, err := s.state()
		if err != nil {
			return st, err
		}
		if st.running == 0 && st.waiting == 0 && st.kvUsage == 0 && (goroutines < 0 || st.goroutines <= goroutines) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not idle %v after: %v running, %v waiting, KV usage %v, %v goroutines (baseline %v)",
				within, st.running, st.waiting, st.kvUsage, st.goroutines, goroutines)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
