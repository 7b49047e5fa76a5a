package jsonschema

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// benchSchemas returns the paths of the JSONSchemaBench sample, sorted.
func benchSchemas(t *testing.T) []string {
	t.Helper()
	dir := testdata.Path(t, "structured/jsonschemabench")
	paths, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) != 300 {
		t.Fatalf("found %d schemas in %s, want 300", len(paths), dir)
	}
	return paths
}

// TestBenchCompileRate compiles the 300 JSONSchemaBench schemas: at least 97% must compile,
// and each refusal must name what it refuses.
func TestBenchCompileRate(t *testing.T) {
	paths := benchSchemas(t)
	compiled := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ToGBNF(data, Options{}); err != nil {
			rel, _ := filepath.Rel(filepath.Dir(filepath.Dir(p)), p)
			t.Logf("refused %s: %v", rel, err)
			continue
		}
		compiled++
	}
	rate := float64(compiled) / float64(len(paths))
	t.Logf("compiled %d of %d schemas (%.1f%%)", compiled, len(paths), 100*rate)
	if rate < 0.97 {
		t.Errorf("compile rate %.1f%% is below 97%%", 100*rate)
	}
}
