package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestOpenAINpmClient builds the kvasir binary, starts `kvasir serve` with the built-in
// default model on a random port, and runs test/openai (the official openai npm client
// under node --test) against it; then it sends SIGTERM and expects a clean exit. It skips
// only when node or npm is missing and KVASIR_REQUIRE_TESTDATA is unset.
func TestOpenAINpmClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var bin string
	node, dir := openAIClient(t, ctx, func(string) {
		// The binary builds (once for all the tests) while the client installs.
		bin = kvasirBinary(t, ctx)
	})

	var key [8]byte
	rand.Read(key[:])
	apiKey := "test-" + hex.EncodeToString(key[:])
	srv := startServe(t, bin, "--api-key", apiKey, "--max-num-seqs", "4", "--max-waiting", "2")
	test := exec.CommandContext(ctx, node, "--test", "openai.test.mjs", "responses.test.mjs")
	test.Dir = dir
	test.Env = append(os.Environ(), "KVASIR_BASE_URL="+srv.baseURL, "KVASIR_API_KEY="+apiKey, "KVASIR_MODEL="+srv.model)
	out, err := test.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s\nserver log:\n%s", err, tail(out, 12000), srv.logs.String())
	}
	t.Logf("openai client tests passed against %s (%s)", srv.baseURL, summary(out))
	srv.stop(t)
}

// servedBinary is a `kvasir serve` process started by startServe.
type servedBinary struct {
	cmd *exec.Cmd
	// model is the served name and baseURL the /v1 address the server printed.
	model, baseURL string
	logs           *lockedBuffer
	exited         chan error
}

// startServe starts `bin serve` with the built-in default model on a random port, a small
// KV cache, two threads and the extra flags args, and waits for its address line; the
// process is killed when the test ends, unless stop ended it first.
func startServe(t *testing.T, bin string, args ...string) *servedBinary {
	t.Helper()
	args = append([]string{"serve", "--port", "0", "--kv-cache-memory", "128MiB", "--threads", "2", "--drain-timeout", "20s"}, args...)
	srv := &servedBinary{cmd: exec.Command(bin, args...), logs: &lockedBuffer{}, exited: make(chan error, 1)}
	stderr, err := srv.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case err := <-srv.exited:
			srv.exited <- err
		default:
			srv.cmd.Process.Kill()
			srv.exited <- <-srv.exited
		}
	})
	addr := make(chan [2]string, 1)
	go func() {
		re := regexp.MustCompile(`serving (\S+) on (http://\S+/v1)`)
		sc := bufio.NewScanner(stderr)
		found := false
		for sc.Scan() {
			srv.logs.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !found {
				found = true
				addr <- [2]string{m[1], m[2]}
			}
		}
		io.Copy(io.Discard, stderr)
		srv.exited <- srv.cmd.Wait()
	}()
	select {
	case a := <-addr:
		srv.model, srv.baseURL = a[0], a[1]
	case err := <-srv.exited:
		srv.exited <- err
		t.Fatalf("kvasir serve exited before serving: %v\n%s", err, srv.logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("kvasir serve did not start:\n%s", srv.logs.String())
	}
	return srv
}

// stop sends SIGTERM and expects a clean exit.
func (srv *servedBinary) stop(t *testing.T) {
	t.Helper()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-srv.exited:
		srv.exited <- err
		if err != nil {
			t.Errorf("kvasir serve after SIGTERM: %v\n%s", err, srv.logs.String())
		}
	case <-time.After(40 * time.Second):
		t.Errorf("kvasir serve did not exit after SIGTERM:\n%s", srv.logs.String())
	}
}

// openAIClient copies test/openai into a temporary folder and installs the openai npm client
// there (npm ci), running also(dir) meanwhile; it returns node's path and the folder. It
// skips only when node or npm is missing and KVASIR_REQUIRE_TESTDATA is unset.
func openAIClient(t *testing.T, ctx context.Context, also func(dir string)) (node, dir string) {
	t.Helper()
	return npmClient(t, ctx, "openai", also)
}

// npmClient copies the npm test folder test/name into a temporary folder and installs its
// locked packages there (npm ci), running also(dir) meanwhile; it returns node's path and
// the folder. It skips only when node or npm is missing and KVASIR_REQUIRE_TESTDATA is
// unset.
func npmClient(t *testing.T, ctx context.Context, name string, also func(dir string)) (node, dir string) {
	t.Helper()
	node, nodeErr := exec.LookPath("node")
	npm, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		if os.Getenv("KVASIR_REQUIRE_TESTDATA") != "" {
			t.Fatalf("node and npm are required (KVASIR_REQUIRE_TESTDATA is set): node: %v, npm: %v", nodeErr, npmErr)
		}
		t.Skipf("node or npm not installed (node: %v, npm: %v)", nodeErr, npmErr)
	}
	dir = t.TempDir()
	src := filepath.Join("..", "..", "test", name)
	files, err := filepath.Glob(filepath.Join(src, "*.*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var npmOut []byte
	var npmErrRun error
	wg.Add(1)
	go func() {
		defer wg.Done()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		npmOut, npmErrRun = cmd.CombinedOutput()
	}()
	if also != nil {
		also(dir)
	}
	wg.Wait()
	if npmErrRun != nil {
		t.Fatalf("npm ci: %v\n%s", npmErrRun, npmOut)
	}
	return node, dir
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// summary picks node --test's "# pass N" and "# fail N" lines.
func summary(out []byte) string {
	var parts []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "# pass") || strings.HasPrefix(line, "# fail") {
			parts = append(parts, strings.TrimPrefix(line, "# "))
		}
	}
	if len(parts) == 0 {
		return "no summary"
	}
	return strings.Join(parts, ", ")
}
