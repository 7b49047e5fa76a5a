package jsonschema

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/structured"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// benchSchemas returns the paths of the JSONSchemaBench sample, sorted.
func benchSchemas(t testing.TB) []string {
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

// llama3Trie returns the tokenizer of Llama 3's 128k vocabulary (testdata) and its token
// trie.
func llama3Trie(tb testing.TB) (*tokenizer.Tokenizer, *structured.TokenTrie) {
	tb.Helper()
	dir := testdata.Path(tb, "tokenizers/llama3")
	v, err := tokenizer.VocabFromLlama3Files(filepath.Join(dir, "encoder.json"), filepath.Join(dir, "vocab.bpe"))
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		tb.Fatal(err)
	}
	trie, err := structured.NewTokenTrie(tok)
	if err != nil {
		tb.Fatal(err)
	}
	return tok, trie
}

// BenchmarkMaskBenchSchemas reports mask and compile times on the Llama 3 vocabulary over
// every 3rd JSONSchemaBench schema (o6251 left out: its masks take seconds), as `kvasir bench
// grammar` measures them: each schema compiled and bound to the trie, then two simulated
// generations of 32 tokens sharing one random source (so the paths, and the first walks of
// each lexeme state, depend on the whole sample).
func BenchmarkMaskBenchSchemas(b *testing.B) {
	tok, trie := llama3Trie(b)
	paths := benchSchemas(b)
	fe := FrontEnd(Options{})
	var masks, compiles []time.Duration
	b.ResetTimer()
	for range b.N {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < len(paths); i += 3 {
			if strings.HasSuffix(paths[i], "o6251.json") {
				continue
			}
			src, err := os.ReadFile(paths[i])
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			g, err := fe(src)
			if err != nil {
				continue // refused by the schema compiler
			}
			c, err := structured.Compile(g, structured.DefaultLimits())
			if err != nil {
				continue
			}
			tg := structured.NewTokenGrammar(c, trie, tok)
			compiles = append(compiles, time.Since(start))
			for range 2 {
				gen, err := structured.Simulate(tg, rng, 32)
				if err != nil {
					b.Fatalf("%s: %v", paths[i], err)
				}
				masks = append(masks, gen.Masks...)
			}
		}
	}
	b.StopTimer()
	slices.Sort(masks)
	slices.Sort(compiles)
	var sum time.Duration
	for _, d := range masks {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(sum)/float64(len(masks)), "mean-us/mask")
	b.ReportMetric(us(masks[len(masks)/2]), "p50-us/mask")
	b.ReportMetric(us(masks[len(masks)*99/100]), "p99-us/mask")
	b.ReportMetric(us(compiles[len(compiles)/2])/1e3, "p50-ms/compile")
	b.ReportMetric(us(compiles[len(compiles)*99/100])/1e3, "p99-ms/compile")
}
