package jsonschema

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/structured"
)

// TestCompileTimes (KVASIR_COMPILE_TIMES=1) times each phase of the compile of every
// JSONSchemaBench schema on the Llama 3 vocabulary: schema to GBNF, GBNF to a Grammar,
// Compile (lowering and automata), NewTokenGrammar (binding to the trie), and prints the
// slowest ones. KVASIR_COMPILE_ONLY (comma-separated substrings of file names) keeps only
// the schemas named, KVASIR_COMPILE_REPEAT compiles each that many times (for a CPU
// profile of the slow ones), and KVASIR_GBNF_OUT writes each schema's GBNF into that folder
// (for structured's TestFragmentsEquivalent with KVASIR_GBNF_DIR).
func TestCompileTimes(t *testing.T) {
	now := time.Now
	if os.Getenv("KVASIR_COMPILE_TIMES") == "cpu" {
		now = cpuClock
	}
	if os.Getenv("KVASIR_COMPILE_TIMES") == "" {
		t.Skip("set KVASIR_COMPILE_TIMES=1")
	}
	tok, trie := llama3Trie(t)
	type row struct {
		name                    string
		gbnf, parse, comp, bind time.Duration
		total                   time.Duration
		terms, states           int
	}
	var rows []row
	only := strings.Split(os.Getenv("KVASIR_COMPILE_ONLY"), ",")
	repeat, _ := strconv.Atoi(os.Getenv("KVASIR_COMPILE_REPEAT"))
	gbnfOut := os.Getenv("KVASIR_GBNF_OUT")
	var paths []string
	for _, p := range benchSchemas(t) {
		if slices.ContainsFunc(only, func(s string) bool { return strings.Contains(filepath.Base(p), s) }) {
			for range max(repeat, 1) {
				paths = append(paths, p)
			}
		}
	}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		r := row{name: filepath.Base(p)}
		t0 := now()
		text, err := ToGBNF(src, Options{})
		if err != nil {
			continue
		}
		t1 := now()
		if gbnfOut != "" {
			name := strings.TrimSuffix(filepath.Base(p), ".json") + ".gbnf"
			if err := os.WriteFile(filepath.Join(gbnfOut, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		g, err := structured.ParseGBNF(text)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		t2 := now()
		lim := structured.DefaultLimits()
		lim.Time = time.Minute // a loaded machine must not refuse what a quiet one compiles
		c, err := structured.Compile(g, lim)
		if err != nil {
			t.Logf("%s: %v", r.name, err)
			continue
		}
		t3 := now()
		structured.NewTokenGrammar(c, trie, tok)
		t4 := now()
		r.gbnf, r.parse, r.comp, r.bind, r.total = t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t4.Sub(t0)
		r.terms = c.NumTerminals()
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.total - a.total) })
	var totals []time.Duration
	for _, r := range rows {
		totals = append(totals, r.total)
	}
	slices.Sort(totals)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1e3) }
	t.Logf("%d compiled: p50 %s ms, p99 %s ms", len(rows), ms(totals[int(float64(len(totals))*0.5+0.5)-1]), ms(totals[int(float64(len(totals))*0.99+0.5)-1]))
	for _, r := range rows[:min(10, len(rows))] {
		t.Logf("%-40s total %8s gbnf %8s parse %8s compile %8s bind %8s terms %d", r.name, ms(r.total), ms(r.gbnf), ms(r.parse), ms(r.comp), ms(r.bind), r.terms)
	}
}

// cpuClock returns the process's CPU time (user and system) as a time.
func cpuClock() time.Time {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Unix(0, ru.Utime.Nano()+ru.Stime.Nano())
}
