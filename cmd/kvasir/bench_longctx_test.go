package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestBenchLongCtx: `kvasir bench longctx --json` prints a row per policy and budget, full
// attention once, with the KV of a budgeted row within its budget; bad policies and budgets
// are refused before the model loads.
func TestBenchLongCtx(t *testing.T) {
	m := testdata.Path(t, "models/stories260K/stories260K.bin")
	z := testdata.Path(t, "models/stories260K/tok512.bin")
	f := testdata.Path(t, "corpus/tinystories_excerpt.txt")
	out := captureStdout(t, func() error {
		return runBench([]string{"longctx", "-m", m, "-z", z, "-f", f, "--policies", "full,streaming,snapkv", "--budgets", "64", "--ctx", "200", "--threads", "1", "--json"})
	})
	var rows []bench.LongCtxRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 3 || rows[0].Policy != "full" || rows[0].Tokens != 199 || rows[1].PeakKVTokens != 64 || rows[2].Policy != "snapkv" {
		t.Errorf("rows %+v", rows)
	}
	// --selections measures h2o and snapkv once per selection, streaming once.
	out = captureStdout(t, func() error {
		return runBench([]string{"longctx", "-m", m, "-z", z, "-f", f, "--policies", "streaming,h2o", "--budgets", "64", "--selections", "sequence,head", "--ctx", "200", "--threads", "1", "--json"})
	})
	rows = nil
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 3 || rows[0].Selection != "" || rows[1].Selection != "sequence" || rows[2].Selection != "head" || rows[2].PeakKVTokens != 64 {
		t.Errorf("rows with --selections: %+v", rows)
	}
	for _, args := range [][]string{
		{"--policies", "lru"},
		{"--policies", "streaming", "--budgets", "16"},
		{"--budgets", "6x"},
		{"--policies", "h2o", "--selections", "token"},
	} {
		err := runBench(append([]string{"longctx", "-m", m, "-z", z, "-f", f}, args...))
		if err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %v, want an error naming the flag", args, err)
		}
	}
}
