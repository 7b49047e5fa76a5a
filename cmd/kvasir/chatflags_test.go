package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestServeRefusesHostileChatTemplate: serve with a --chat-template that recurses without
// end exits with an error naming the limit and its flag, before it listens.
func TestServeRefusesHostileChatTemplate(t *testing.T) {
	bin := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	tmpl := filepath.Join(t.TempDir(), "evil.jinja")
	if err := os.WriteFile(tmpl, []byte(`{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := runServe([]string{"-m", bin, "-z", tok, "--threads", "1", "--kv-cache-memory", "1MiB", "--port", "0",
		"--chat-template", tmpl, "--chat-template-max-depth", "20"})
	if err == nil || !strings.Contains(err.Error(), "recursion depth") || !strings.Contains(err.Error(), "--chat-template-max-depth") ||
		!strings.Contains(err.Error(), "20 nested macro calls") {
		t.Fatalf("serve: %v, want the recursion depth limit of 20 named with its flag", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("serve took %v to refuse the template", d)
	}
}

// TestChatTemplateFlagsChecked: a limit that is not positive, or a size that does not
// parse, is an error naming the flag, before anything is loaded.
func TestChatTemplateFlagsChecked(t *testing.T) {
	for _, args := range [][]string{
		{"--chat-template-timeout", "-1s"}, {"--chat-template-timeout", "0s"}, {"--chat-template-max-depth", "-3"},
		{"--chat-template-max-iterations", "0"}, {"--chat-template-max-output", "lots"}, {"--chat-template-max-stack", "0"},
		{"--chat-template-max-memory", "-1MiB"}, {"--chat-template-workers", "0"},
	} {
		err := runServe(append([]string{"-m", "/nonexistent/model.gguf"}, args...))
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("serve %v: %v, want an error naming %s", args, err, args[0])
		}
	}
}
