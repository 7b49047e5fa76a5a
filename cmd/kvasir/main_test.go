package main

import (
	"os"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/chat"
)

// TestMain lets the test binary serve as the chat template sandbox's worker (run --chat
// and chat start their own executable as one), then runs the tests.
func TestMain(m *testing.M) {
	chat.ServeWorkerIfAsked()
	os.Exit(m.Run())
}
