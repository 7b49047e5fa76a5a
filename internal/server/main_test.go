package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/chat"
)

// TestMain lets the test binary serve as the chat template sandbox's worker (the sandbox
// starts its own executable), then runs the tests.
func TestMain(m *testing.M) {
	chat.ServeWorkerIfAsked()
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built is the kvasir binary the tests that drive `kvasir serve` share, built once.
var built struct {
	once      sync.Once
	dir, path string
	err       error
	out       []byte
}

// kvasirBinary builds the kvasir binary on first use and returns its path.
func kvasirBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "kvasir-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "kvasir")
		build := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", built.path, "github.com/kvasir-llm/kvasir/cmd/kvasir")
		built.out, built.err = build.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.path
}
