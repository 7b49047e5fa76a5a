package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestPruneAndLowrankRefuse checks that bad requests to kvasir prune and kvasir lowrank
// fail with a clear error and leave no file.
func TestPruneAndLowrankRefuse(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	q8 := testdata.Path(t, "models/stories260K/stories260K-Q8_0.gguf")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.gguf")
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, []byte(" \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", model, "-o", out, "--sparsity", "0.5"}, "--method is required"},
		{[]string{"-m", model, "-o", out, "--method", "random", "--sparsity", "0.5"}, "want magnitude, wanda or sparsegpt"},
		{[]string{"-m", model, "-o", out, "--method", "magnitude"}, "--sparsity S or --pattern N:M is required"},
		{[]string{"-m", model, "-o", out, "--method", "magnitude", "--sparsity", "1"}, "want a fraction in [0, 1)"},
		{[]string{"-m", model, "-o", out, "--method", "magnitude", "--sparsity", "0.5", "--pattern", "2:4"}, "exclude each other"},
		{[]string{"-m", model, "-o", out, "--method", "magnitude", "--pattern", "2-4"}, "want N:M"},
		{[]string{"-m", model, "-o", out, "--method", "magnitude", "--pattern", "4:8"}, "not a multiple of the pattern"},
		{[]string{"-m", model, "-o", out, "--method", "wanda", "--sparsity", "0.5"}, "needs --calibration"},
		{[]string{"-m", model, "-o", out, "--method", "sparsegpt", "--sparsity", "0.5", "--calibration", empty}, "is empty"},
		{[]string{"-m", q8, "-o", out, "--method", "magnitude", "--sparsity", "0.5"}, "F32, F16 or BF16"},
		{[]string{"-m", model, "-o", out, "--drop-layers", "1", "--method", "wanda"}, "do not combine"},
		{[]string{"-m", model, "-o", out, "--drop-heads", "2", "--calibration", empty}, "is empty"},
	} {
		if err := runPrune(append(c.args, "--quiet", "--threads", "2")); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prune %v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", model, "-o", out}, "one of --rank"},
		{[]string{"-m", model, "-o", out, "--rank", "4", "--energy", "0.9"}, "one of --rank"},
		{[]string{"-m", model, "-o", out, "--energy", "2"}, "(0, 1]"},
		{[]string{"-m", model, "-o", out, "--rank", "4", "--tensors", "("}, "--tensors"},
		{[]string{"-m", model, "-o", filepath.Join(dir, "folder"), "--rank", "4"}, "must be a .gguf file"},
	} {
		if err := runLowrank(append(c.args, "--quiet")); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lowrank %v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "empty.txt" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}
