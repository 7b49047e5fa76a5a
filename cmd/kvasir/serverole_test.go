package main

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestRoleFlags: kvasir serve refuses a role it does not know before loading the model,
// and a role that cannot work (no prefix cache; a decode listener on every interface
// without an address to publish) once the model is loaded; kvasir router takes --prefill
// and --decode together only, and not with --backend.
func TestRoleFlags(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "mixed", "-m", "/nonexistent.gguf"}, `--role "mixed": want one of both, prefill, decode`},
		{[]string{"--role", "decode", "--no-prefix-caching", "-m", model, "--port", "0", "--threads", "1"}, "--no-prefix-caching"},
		{[]string{"--role", "decode", "--kv-transfer-host", "0.0.0.0", "--kv-transfer-port", "0", "-m", model, "--port", "0", "--threads", "1"}, "--kv-transfer-advertise"},
	} {
		var err error
		captureStderr(t, func() { err = runServe(c.args) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %q: %v, want an error naming %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefill", "http://127.0.0.1:1"}, "--prefill and --decode go together"},
		{[]string{"--decode", "http://127.0.0.1:1"}, "--prefill and --decode go together"},
		{[]string{"--backend", "http://127.0.0.1:2", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:3"}, "--backend with --prefill/--decode"},
		{[]string{"--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:1"}, "given twice"},
	} {
		var err error
		captureStderr(t, func() { err = runRouter(c.args) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("router %q: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}
