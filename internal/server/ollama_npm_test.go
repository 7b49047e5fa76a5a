package server

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOllamaNpmClient builds the kvasir binary, starts `kvasir serve` with the built-in
// default model (its CORS flags at their defaults) and runs test/ollama under node --test:
// the official ollama npm client (list, show, version, generate and chat, whole and
// streamed, errors) and a browser-style cross-origin fetch with its preflight. It skips only
// when node or npm is missing and KVASIR_REQUIRE_TESTDATA is unset.
func TestOllamaNpmClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var bin string
	node, dir := npmClient(t, ctx, "ollama", func(string) {
		// The binary builds (once for all the tests) while the client installs.
		bin = kvasirBinary(t, ctx)
	})
	const apiKey = "test-ollama-key"
	srv := startServe(t, bin, "--api-key", apiKey)
	test := exec.CommandContext(ctx, node, "--test", "ollama.test.mjs")
	test.Dir = dir
	test.Env = append(os.Environ(), "KVASIR_HOST="+strings.TrimSuffix(srv.baseURL, "/v1"), "KVASIR_API_KEY="+apiKey, "KVASIR_MODEL="+srv.model)
	out, err := test.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s\nserver log:\n%s", err, tail(out, 12000), srv.logs.String())
	}
	t.Logf("ollama client tests passed against %s (%s)", srv.baseURL, summary(out))
	srv.stop(t)
}
