package kvasir

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	validator "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/kvasir-llm/kvasir/internal/structured"
	"github.com/kvasir-llm/kvasir/internal/structured/jsonschema"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// constrained generates n samples at temperature 1 of prompt held to s and returns their
// texts and finish reasons.
func constrained(t *testing.T, e *Engine, s StructuredOutput, n, maxTokens int) ([]string, []string) {
	t.Helper()
	return constrainedAt(t, e, s, n, maxTokens, 1)
}

// constrainedAt is constrained at temperature temp (0: greedy).
func constrainedAt(t *testing.T, e *Engine, s StructuredOutput, n, maxTokens int, temp float32) ([]string, []string) {
	t.Helper()
	proc, err := e.Constrain(s)
	if err != nil {
		t.Fatalf("constrain %+v: %v", s, err)
	}
	ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Processors: []Processor{proc},
		Params: SamplingParams{MaxTokens: maxTokens, N: n, Temperature: temp, Seed: ptr(uint64(7))}})
	if err != nil {
		t.Fatal(err)
	}
	texts, finish := make([]string, n), make([]string, n)
	for o := range ch {
		if o.Err != nil {
			t.Fatalf("choice %d: %v", o.Index, o.Err)
		}
		texts[o.Index] += o.Text
		if o.FinishReason != "" {
			finish[o.Index] = o.FinishReason
		}
	}
	return texts, finish
}

func ptr[T any](v T) *T { return &v }

// TestConstrainGenerate: a real model (stories260K, whose SentencePiece vocabulary spells any
// byte through its byte tokens) sampled at
// temperature 1 under each kind of constraint produces only output of the language, and a
// grammar that is complete ends the request with "stop": a JSON Schema (every sample
// validates with the validator library), a regex, a choice list and a GBNF grammar.
func TestConstrainGenerate(t *testing.T) {
	e, err := Open(testdata.Path(t, "models/stories260K/stories260K.bin"), Options{Tokenizer: testdata.Path(t, "models/stories260K/tok512.bin"), Threads: 2, KVCacheMemory: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	schema := []byte(`{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
		"age": {"type": "integer", "minimum": 0, "maximum": 120}, "pet": {"enum": ["cat", "dog"]}},
		"required": ["name", "age", "pet"], "additionalProperties": false}`)
	doc, err := validator.UnmarshalJSON(strings.NewReader(string(schema)))
	if err != nil {
		t.Fatal(err)
	}
	c := validator.NewCompiler()
	if err := c.AddResource("file:///s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("file:///s.json")
	if err != nil {
		t.Fatal(err)
	}
	texts, finish := constrained(t, e, StructuredOutput{JSONSchema: schema}, 6, 80)
	for i, s := range texts {
		v, err := validator.UnmarshalJSON(strings.NewReader(s))
		if err == nil {
			err = sch.Validate(v)
		}
		if err != nil || finish[i] != "stop" {
			t.Errorf("json schema sample %d (%s): %q: %v", i, finish[i], s, err)
		}
	}

	re := regexp.MustCompile(`^[a-z]{2,6}-[0-9]{3}$`)
	texts, finish = constrained(t, e, StructuredOutput{Regex: `[a-z]{2,6}-[0-9]{3}`}, 6, 20)
	for i, s := range texts {
		if !re.MatchString(s) || finish[i] != "stop" {
			t.Errorf("regex sample %d (%s): %q", i, finish[i], s)
		}
	}

	options := []string{"yes", "no", "maybe later"}
	texts, _ = constrained(t, e, StructuredOutput{Choice: options}, 6, 10)
	for i, s := range texts {
		if !slices.Contains(options, s) {
			t.Errorf("choice sample %d: %q", i, s)
		}
	}

	texts, _ = constrained(t, e, StructuredOutput{Grammar: `root ::= "The " ("cat" | "dog") " " [a-z]+ "."`}, 4, 20)
	gre := regexp.MustCompile(`^The (cat|dog) [a-z]+\.$`)
	for i, s := range texts {
		if !gre.MatchString(s) {
			t.Errorf("gbnf sample %d: %q", i, s)
		}
	}

	obj, finish := constrained(t, e, StructuredOutput{JSONObject: true, WhitespacePattern: `[ ]{0,2}`}, 4, 60)
	for i, s := range obj {
		var m map[string]any
		err := json.Unmarshal([]byte(s), &m)
		switch {
		case finish[i] == "stop" && err != nil:
			t.Errorf("json object sample %d: %q: %v", i, s, err)
		case finish[i] == "length" && !strings.HasPrefix(s, "{"):
			t.Errorf("json object sample %d, cut by max_tokens: %q", i, s)
		}
	}
}

// TestConstrainRefuses: every malformed or unsupported constraint is an
// ErrStructuredOutput naming its problem, and nothing is given to the engine.
func TestConstrainRefuses(t *testing.T) {
	e, err := Open(testdata.Path(t, "models/stories260K/stories260K.bin"), Options{Tokenizer: testdata.Path(t, "models/stories260K/tok512.bin"), Threads: 1, KVCacheMemory: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, c := range []struct {
		s    StructuredOutput
		want string
	}{
		{StructuredOutput{}, "exactly one"},
		{StructuredOutput{Regex: "a", Choice: []string{"b"}}, "exactly one"},
		{StructuredOutput{Choice: []string{}}, "at least one"},
		{StructuredOutput{Regex: `(a)\1`}, "backreference"},
		{StructuredOutput{Grammar: `root ::= "a`}, "1:"},
		{StructuredOutput{JSONSchema: []byte(`{"type": "object", "if": {}}`)}, "if"},
		{StructuredOutput{JSONSchema: []byte(`{"type": `)}, ""},
	} {
		_, err := e.Constrain(c.s)
		if !errors.Is(err, ErrStructuredOutput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an ErrStructuredOutput naming %q", c.s, err, c.want)
		}
	}
}

// TestProbeRefusesSlowMasks: on Llama 3's 128k vocabulary, the mask-time probe refuses a
// grammar whose masks take longer than its limit, naming the time and the limit, and a
// plain schema passes the engine's limit.
func TestProbeRefusesSlowMasks(t *testing.T) {
	dir := testdata.Path(t, "tokenizers/llama3")
	v, err := tokenizer.VocabFromLlama3Files(filepath.Join(dir, "encoder.json"), filepath.Join(dir, "vocab.bpe"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	trie, err := structured.NewTokenTrie(tok)
	if err != nil {
		t.Fatal(err)
	}
	probe := func(schema string, limit time.Duration) error {
		g, err := jsonschema.FrontEnd(jsonschema.Options{})([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		c, err := structured.Compile(g, structured.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return probeMasks(structured.NewTokenGrammar(c, trie, tok), tok, limit)
	}
	// Three long counted strings side by side, whose first mask walks the trie for each
	// counting state: once 438 ms on the 2-core development machine, a few ms since the
	// grammar core's speed-ups, so no schema is reliably slower than the engine's 50 ms
	// limit on every machine. The refusal is checked against a limit below any mask's
	// time instead, and the plain schema against the engine's own limit.
	slow := `{"anyOf": [{"type": "string", "maxLength": 255}, {"type": "string", "minLength": 3, "maxLength": 250},
		{"type": "string", "maxLength": 240, "pattern": "^[a-z ]*$"}]}`
	if err := probe(slow, time.Nanosecond); err == nil || !strings.Contains(err.Error(), "too slow") || !strings.Contains(err.Error(), "at most 1ns") {
		t.Errorf("slow schema: %v, want a too-slow error naming the limit", err)
	}
	if err := probe(slow, maxProbeMask); err != nil {
		t.Logf("the long strings' schema is refused at the engine's limit on this machine: %v", err)
	}
	if err := probe(`{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 16}}}`, maxProbeMask); err != nil {
		t.Errorf("plain schema: %v", err)
	}
}

// TestConstrainSpeculative: with n-gram drafts, fixed K = 4 so that every step verifies,
// the drafts are masked by the grammar like sampled tokens and a draft off the grammar is
// rejected in verification: greedy output under a regex and a JSON Schema equals the output
// without speculation, and sampled output stays in the language. A draft model makes its
// drafts inside the step, after the rows' masks are computed, so a masked sequence does not
// draft with one (it once accepted a draft the grammar forbade): its output is the plain one.
func TestConstrainSpeculative(t *testing.T) {
	bin, tok := testdata.Path(t, "models/stories260K/stories260K.bin"), testdata.Path(t, "models/stories260K/tok512.bin")
	draft := testdata.Path(t, "models/llama2xs/llama2xs.bin")
	schema := []byte(`{"type": "object", "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 1, "maximum": 99}},
		"required": ["name", "age"], "additionalProperties": false}`)
	var drafts int64 // verifications in the last outputs call
	outputs := func(sc *SpeculativeConfig, temp float32) []string {
		e, err := Open(bin, Options{Tokenizer: tok, Threads: 2, KVCacheMemory: 16 << 20, MaxModelLen: 256, Speculative: sc})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		var out []string
		for _, s := range []StructuredOutput{{Regex: `(Once|One day) [a-z ,]{10,40}\.`}, {JSONSchema: schema}} {
			texts, _ := constrainedAt(t, e, s, 3, 64, temp)
			out = append(out, texts...)
		}
		drafts = e.Stats().SpecDrafts
		return out
	}
	plain := outputs(nil, 0)
	re := regexp.MustCompile(`^(Once|One day) [a-z ,]{10,40}\.$`)
	for _, js := range []string{
		`{"model": "` + draft + `", "num_speculative_tokens": 4, "dynamic": false}`,
		`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "dynamic": false}`,
	} {
		sc := mustSpec(t, js)
		if got := outputs(sc, 0); !slices.Equal(got, plain) {
			t.Errorf("%s: greedy %q, without speculation %q", js, got, plain)
		}
		if ngram := sc.Model == ""; ngram != (drafts > 0) {
			t.Errorf("%s: %d verifications", js, drafts)
		}
		sampled := outputs(sc, 1)
		for i, s := range sampled[:3] {
			if !re.MatchString(s) && len(s) < 60 {
				t.Errorf("%s: sampled regex output %d: %q", js, i, s)
			}
		}
		for i, s := range sampled[3:] {
			var v map[string]any
			if err := json.Unmarshal([]byte(s), &v); err != nil && !strings.HasPrefix(s, `{"name":"`) {
				t.Errorf("%s: sampled json output %d: %q", js, i, s)
			}
		}
	}
}

// TestConstrainJumpForward: on stories260K, greedy JSON Schema output with jump-forward
// (the default) and without both validate; with it the forced keys are appended (counted in
// ForcedTokens) and the engine takes fewer steps. Token ids may differ where the model's
// masked greedy pick splits a forced run otherwise than the tokenizer (the forced text is the
// same either way, and the free text after it may then differ, as the model conditions on
// other ids); a grammar that forces everything (a const) gives the same text with and
// without it.
func TestConstrainJumpForward(t *testing.T) {
	bin, tokPath := testdata.Path(t, "models/stories260K/stories260K.bin"), testdata.Path(t, "models/stories260K/tok512.bin")
	schema := []byte(`{"type": "object", "properties": {"character_name": {"type": "string", "maxLength": 8},
		"favourite_number": {"type": "integer", "minimum": 1, "maximum": 9}, "description_of_the_day": {"enum": ["sunny", "rainy"]}},
		"required": ["character_name", "favourite_number", "description_of_the_day"], "additionalProperties": false}`)
	const konst = `{"const": "Once upon a time, there was a little girl named Lily."}`
	run := func(disable bool) (texts []string, steps, forced int64) {
		e, err := Open(bin, Options{Tokenizer: tokPath, Threads: 2, KVCacheMemory: 8 << 20, DisableJumpForward: disable})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for _, s := range []StructuredOutput{{JSONSchema: schema}, {JSONSchema: []byte(konst)}} {
			out, finish := constrainedAt(t, e, s, 1, 200, 0)
			if finish[0] != "stop" {
				t.Fatalf("jump-forward off %v: %q ended with %s", disable, out[0], finish[0])
			}
			texts = append(texts, out[0])
		}
		st := e.Stats()
		return texts, st.Steps, st.ForcedTokens
	}
	with, stepsWith, forced := run(false)
	without, stepsWithout, forcedOff := run(true)
	for _, out := range []string{with[0], without[0]} {
		var v struct {
			Name   *string `json:"character_name"`
			Number *int    `json:"favourite_number"`
			Desc   *string `json:"description_of_the_day"`
		}
		err := json.Unmarshal([]byte(out), &v)
		if err != nil || v.Name == nil || len(*v.Name) > 8 || v.Number == nil || *v.Number < 1 || *v.Number > 9 || v.Desc == nil || (*v.Desc != "sunny" && *v.Desc != "rainy") {
			t.Errorf("output %q does not validate (%v)", out, err)
		}
	}
	for _, texts := range [][]string{with, without} {
		if want := `"Once upon a time, there was a little girl named Lily."`; texts[1] != want {
			t.Errorf("const output %q, want %q", texts[1], want)
		}
	}
	if forced == 0 || forcedOff != 0 {
		t.Errorf("forced tokens %d with jump-forward, %d without", forced, forcedOff)
	}
	if stepsWith >= stepsWithout {
		t.Errorf("%d steps with jump-forward, %d without", stepsWith, stepsWithout)
	}
	t.Logf("steps %d with jump-forward (%d tokens forced), %d without; outputs %q and %q", stepsWith, forced, stepsWithout, with, without)
}
