package chat

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the sandbox's worker (the sandbox starts its own
// executable), then runs the tests.
func TestMain(m *testing.M) {
	ServeWorkerIfAsked()
	os.Exit(m.Run())
}
