package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestBenchGrammar runs `kvasir bench grammar` over the package's grammar fixtures on a
// small real tokenizer and checks its JSON report.
func TestBenchGrammar(t *testing.T) {
	tok := testdata.Path(t, "models/tinystories-656k")
	out := captureStdout(t, func() error {
		return benchGrammar([]string{"--tokenizer", tok, "--runs", "2", "--max-tokens", "32", "--compiles", "1", "--json",
			"../../internal/structured/testdata/grammars"})
	})
	var report struct {
		Tokens   int             `json:"tokenizer_tokens"`
		Grammars []grammarResult `json:"grammars"`
		All      grammarResult   `json:"all"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if report.Tokens != 2048 || len(report.Grammars) < 5 {
		t.Fatalf("report of %d tokens, %d grammars", report.Tokens, len(report.Grammars))
	}
	sum := 0
	for _, g := range report.Grammars {
		if g.Error != "" || g.Runs != 2 || g.Masks == 0 || g.CompileMS <= 0 {
			t.Errorf("%s: %+v", g.File, g)
		}
		sum += g.Masks
	}
	if report.All.Masks != sum || report.All.P99US < report.All.P50US {
		t.Errorf("totals %+v (masks %d)", report.All, sum)
	}
	err := benchGrammar([]string{"--tokenizer", tok, "x.txt"})
	if err == nil || !strings.Contains(err.Error(), "x.txt") {
		t.Errorf("unknown file: %v", err)
	}
}
