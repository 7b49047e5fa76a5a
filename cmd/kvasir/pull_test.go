package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/hub"
)

// TestPull runs "kvasir pull" against a minimal local hub serving one GGUF file.
func TestPull(t *testing.T) {
	const commit = "fedcba9876543210fedcba9876543210fedcba98"
	data := []byte("GGUF fake model bytes")
	sum := sha256.Sum256(data)
	var revisions []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/models/org/m/revision/"):
			revisions = append(revisions, strings.TrimPrefix(r.URL.Path, "/api/models/org/m/revision/"))
			fmt.Fprintf(w, `{"sha":%q,"siblings":[{"rfilename":"m.gguf","size":%d,"lfs":{"sha256":%q,"size":%d}},{"rfilename":"README.md","size":2}]}`,
				commit, len(data), hex.EncodeToString(sum[:]), len(data))
		case r.URL.Path == "/org/m/resolve/"+commit+"/m.gguf":
			w.Write(data)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	opt := hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir()}
	cache := t.TempDir()
	var out bytes.Buffer
	if err := pull(context.Background(), []string{"--revision", "v2", "--cache-dir", cache, "hf:org/m", "org/m"}, opt, &out); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "models--org--m", "snapshots", commit, "m.gguf")
	if got := out.String(); got != want+"\n"+want+"\n" {
		t.Fatalf("stdout %q, want the path %q twice", got, want)
	}
	if b, err := os.ReadFile(want); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("pulled file: %q, %v", b, err)
	}
	if len(revisions) != 2 || revisions[0] != "v2" {
		t.Errorf("revisions asked %q, want v2 twice", revisions)
	}

	if err := pull(context.Background(), []string{"--cache-dir", cache, "hf:org/nope"}, opt, &out); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("missing repo: err = %v", err)
	}
	if err := pull(context.Background(), nil, opt, &out); err == nil {
		t.Error("no argument accepted")
	}
	if err := pull(context.Background(), []string{"hf:bad"}, opt, &out); err == nil {
		t.Error("bad reference accepted")
	}
}
