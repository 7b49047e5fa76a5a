package jsonschema

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestBenchSamplesValidate draws random strings from the grammar of every bench schema
// that compiles and checks each one three ways: it is JSON, the validator library accepts
// it against the schema, and the grammar engine's matcher accepts it against the GBNF text
// (so the text says what the compiler meant).
func TestBenchSamplesValidate(t *testing.T) {
	// KVASIR_JSONSCHEMA_FULL=1 draws more samples and checks every grammar with the engine
	// (about a minute on 2 cores); the default keeps CI to seconds.
	full := os.Getenv("KVASIR_JSONSCHEMA_FULL") == "1"
	samples, matcherLimit := 3, 1500
	if full {
		samples, matcherLimit = 8, 1<<30
	}
	opts := []Options{{}, {WhitespacePattern: `[ \n]{0,2}`, StrictProperties: true}}
	checked, skipped, engineLimits := 0, 0, 0
	for _, p := range benchSchemas(t) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(filepath.Dir(p)) + "/" + filepath.Base(p)
		sch, err := validatorFor(data)
		if err != nil {
			t.Logf("%s: the validator cannot compile it (%v); skipped", name, err)
			skipped++
			continue
		}
		for oi, opt := range opts {
			g, err := compileSchema(data, opt)
			if err != nil {
				continue // TestBenchCompileRate reports refusals
			}
			// The engine's matcher checks the GBNF text too; large grammars take the
			// engine seconds to compile, so only with KVASIR_JSONSCHEMA_FULL=1.
			var match func(string) bool
			if text := g.writeGBNF(); len(text) < matcherLimit {
				if match, err = compileMatcher(text); err != nil {
					t.Logf("%s (options %d): the grammar engine cannot compile the grammar: %v", name, oi, err)
					engineLimits++
				}
			}
			s := newSampler(g, uint64(len(name)*31+oi))
			for range samples {
				out := s.sample()
				if !json.Valid([]byte(out)) {
					t.Errorf("%s (options %d): sample is not JSON: %s", name, oi, truncate(out, 300))
					continue
				}
				if err := validates(sch, out); err != nil {
					t.Errorf("%s (options %d): sample fails the schema: %s\n%v", name, oi, truncate(out, 300), err)
				}
				if match != nil && !match(out) {
					t.Errorf("%s (options %d): the GBNF matcher rejects a sample of its own grammar: %s", name, oi, truncate(out, 300))
				}
				checked++
			}
		}
	}
	t.Logf("checked %d samples; %d schemas skipped (validator could not compile them); %d grammars over the engine's compile limits", checked, skipped, engineLimits)
	if skipped > 10 {
		t.Errorf("%d schemas skipped", skipped)
	}
}
