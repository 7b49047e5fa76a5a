// Package testdata locates the shared test material (real models, tokenizers, chat templates,
// workloads) that lives beside the repository in ../shared/testdata.
//
// A test that needs a file calls Path; when the file is missing the test is skipped with a
// message naming it, unless KVASIR_REQUIRE_TESTDATA=1 is set (as CI sets it), in which case
// the test fails.
package testdata

import (
	"os"
	"path/filepath"
	"testing"
)

// Root returns the absolute path of the shared testdata folder, found by walking up from the
// working directory to the module root (the folder holding go.mod) and taking
// ../shared/testdata from there. It returns "" when the module root cannot be found.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(dir), "shared", "testdata")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Required reports whether missing test data must fail tests (KVASIR_REQUIRE_TESTDATA=1).
func Required() bool { return os.Getenv("KVASIR_REQUIRE_TESTDATA") == "1" }

// Path returns the absolute path of rel (such as "models/stories260K/stories260K.bin") inside
// the shared testdata folder. When it does not exist the test is skipped, or failed when
// KVASIR_REQUIRE_TESTDATA=1.
func Path(t testing.TB, rel string) string {
	t.Helper()
	root := Root()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if root == "" {
		p = filepath.Join("../shared/testdata", filepath.FromSlash(rel))
	}
	if _, err := os.Stat(p); err != nil {
		if Required() {
			t.Fatalf("shared test data %s is missing (KVASIR_REQUIRE_TESTDATA=1): %v", p, err)
		}
		t.Skipf("shared test data %s is missing; skipping", p)
	}
	return p
}
