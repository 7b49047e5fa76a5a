package router

import (
	"os"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/chat"
)

// TestMain lets the test binary serve as the chat template sandbox's worker (the sandbox
// of each instance starts its own executable), then runs the tests.
func TestMain(m *testing.M) {
	chat.ServeWorkerIfAsked()
	os.Exit(m.Run())
}
