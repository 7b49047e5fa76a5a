package jsonschema_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/structured/jsonschema"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestBenchSchemasThroughModel: JSONSchemaBench schemas (every 10th; all 300 with
// KVASIR_JSONSCHEMA_FULL=1) held on a real model (stories260K, whose vocabulary spells any
// byte) sampled at temperature 1 through the engine: every reply that completes its grammar
// (finish "stop") validates with the validator library (a reply cut by max_tokens is a
// prefix by construction: a token off the grammar would have failed the request). Replies
// of schemas with unbounded strings often run to max_tokens, since a story model keeps
// writing inside a string; some must complete for the check to mean anything. Schemas the compiler refuses, the mask probe refuses or the validator cannot
// compile are counted and left out.
func TestBenchSchemasThroughModel(t *testing.T) {
	paths := jsonschema.BenchSchemas(t)
	if os.Getenv("KVASIR_JSONSCHEMA_FULL") == "" {
		var some []string
		for i := 0; i < len(paths); i += 10 {
			some = append(some, paths[i])
		}
		paths = some
	}
	e, err := kvasir.Open(testdata.Path(t, "models/stories260K/stories260K.bin"), kvasir.Options{
		Tokenizer: testdata.Path(t, "models/stories260K/tok512.bin"), Threads: 2, KVCacheMemory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var tried, refused, finished, cut int
	for _, p := range paths {
		schema, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(filepath.Dir(p)) + "/" + filepath.Base(p)
		sch, err := jsonschema.ValidatorFor(schema)
		if err != nil {
			continue // the oracle cannot judge it
		}
		proc, err := e.Constrain(kvasir.StructuredOutput{JSONSchema: schema})
		if err != nil {
			if !errors.Is(err, kvasir.ErrStructuredOutput) {
				t.Errorf("%s: %v", name, err)
			}
			refused++
			continue
		}
		tried++
		const n = 2
		ch, err := e.Generate(context.Background(), kvasir.Request{Prompt: "Once", Processors: []kvasir.Processor{proc},
			Params: kvasir.SamplingParams{N: n, MaxTokens: 384, Temperature: 1}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		texts, finish := make([]string, n), make([]string, n)
		for o := range ch {
			if o.Err != nil {
				t.Errorf("%s: choice %d: %v", name, o.Index, o.Err)
			}
			texts[o.Index] += o.Text
			if o.FinishReason != "" {
				finish[o.Index] = o.FinishReason
			}
		}
		for i := range n {
			if finish[i] != "stop" {
				cut++
				continue
			}
			finished++
			if err := jsonschema.ValidatesSchema(sch, texts[i]); err != nil {
				t.Errorf("%s: choice %d does not validate: %v\n%s", name, i, err, texts[i])
			}
		}
	}
	t.Logf("%d schemas generated from (%d refused): %d replies complete and valid, %d cut by max_tokens; %d tokens jumped forward",
		tried, refused, finished, cut, e.Stats().ForcedTokens)
	if finished < len(paths)/10 {
		t.Errorf("only %d of %d replies completed their grammar", finished, finished+cut)
	}
}
