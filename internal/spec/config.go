package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/engine"
)

// Method names a way of proposing draft tokens (vLLM's "method").
type Method string

// The methods kvasir runs.
const (
	// MethodNGram proposes by prompt lookup: what followed the latest earlier occurrence of
	// the sequence's last tokens.
	MethodNGram Method = "ngram"
	// MethodDraftModel proposes with a smaller model of the target's vocabulary.
	MethodDraftModel Method = "draft_model"
	// MethodLayerSkip proposes with the target's first layers (self-speculation).
	MethodLayerSkip Method = "layer_skip"
)

// Default n-gram lengths, vLLM's (used when neither prompt_lookup_min nor
// prompt_lookup_max is given; when one is, the other takes its value).
const (
	DefaultPromptLookupMin = 5
	DefaultPromptLookupMax = 5
)

// Config is a speculative-decoding configuration: vLLM's --speculative-config fields, plus
// kvasir's layer_skip method and its dynamic choice of draft lengths. The zero values of
// optional fields mean "not given". Parse reads it from JSON; Check validates one built in
// Go and fills in its defaults.
type Config struct {
	// Method is how drafts are proposed; "" infers it from the fields given (Model:
	// draft_model, DraftLayers: layer_skip, the prompt lookup lengths: ngram).
	Method Method
	// NumSpeculativeTokens is K, the most draft tokens a sequence verifies per step,
	// 1..engine.MaxSpeculativeTokens.
	NumSpeculativeTokens int
	// PromptLookupMin and PromptLookupMax bound the n-gram lengths matched (ngram).
	PromptLookupMin, PromptLookupMax int
	// Model names the draft model (draft_model): any model reference kvasir reads (a
	// .gguf file, a llama2.c .bin, a Hugging Face folder, hf:ORG/REPO, synth:SHAPE).
	Model string
	// DraftLayers is the number of the target's first layers that draft (layer_skip).
	DraftLayers int
	// DisableDynamic keeps K drafts for every sequence that can take them ("dynamic":
	// false) instead of choosing each sequence's draft length per step.
	DisableDynamic bool
	// Proposer, when set (Go API only), proposes the drafts instead of a method's
	// proposer; Method and the method fields must then be empty.
	Proposer engine.Proposer
}

// fields are the JSON keys Parse takes, in the order error messages list them.
var fields = []string{"method", "num_speculative_tokens", "model", "prompt_lookup_min", "prompt_lookup_max", "draft_layers", "dynamic"}

// vllmOnly are vLLM's --speculative-config keys that kvasir does not take: naming them in
// the error tells a vLLM user the key is known, not misspelt.
var vllmOnly = []string{"draft_tensor_parallel_size", "quantization", "max_model_len", "revision", "code_revision",
	"disable_by_batch_size", "disable_padded_drafter_batch", "speculative_token_tree", "draft_sample_method",
	"rejection_sample_method", "enforce_eager", "kv_cache_dtype", "parallel_drafting", "num_speculative_tokens_per_batch_size"}

// vllmMethods are vLLM's methods that kvasir does not run.
var vllmMethods = []string{"eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "deepseek_mtp", "suffix", "ngram_gpu", "custom_class"}

// rawConfig is the JSON form; pointers tell a field given as 0 from one left out.
type rawConfig struct {
	Method               *string `json:"method"`
	NumSpeculativeTokens *int    `json:"num_speculative_tokens"`
	Model                *string `json:"model"`
	PromptLookupMin      *int    `json:"prompt_lookup_min"`
	PromptLookupMax      *int    `json:"prompt_lookup_max"`
	DraftLayers          *int    `json:"draft_layers"`
	Dynamic              *bool   `json:"dynamic"`
}

// Parse reads a configuration from vLLM's --speculative-config JSON, such as
// {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}, and checks
// it (see Check). Unknown keys, keys given twice, values of the wrong type and anything
// after the object are errors.
func Parse(data []byte) (*Config, error) {
	c, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("speculative config: %w", err)
	}
	checked, err := c.Check()
	if err != nil {
		return nil, err
	}
	return &checked, nil
}

// decode turns the JSON into a Config, with the explicit values Check cannot tell from
// omitted ones (zeros, negative numbers, an empty model) refused here.
func decode(data []byte) (Config, error) {
	var c Config
	keys, err := objectKeys(data)
	if err != nil {
		return c, err
	}
	var unknown []string
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			return c, fmt.Errorf("key %q given twice", k)
		}
		seen[k] = true
		if !slices.Contains(fields, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		for _, k := range unknown {
			if slices.Contains(vllmOnly, k) {
				return c, fmt.Errorf("key %q is vLLM's but kvasir does not take it (kvasir takes %s)", k, strings.Join(fields, ", "))
			}
		}
		return c, fmt.Errorf("unknown key %s (kvasir takes %s)", quoteAll(unknown), strings.Join(fields, ", "))
	}
	var raw rawConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return c, fmt.Errorf("key %q: want %s, not a JSON %s", te.Field, wantType(te.Field), te.Value)
		}
		return c, err
	}
	positive := func(name string, v *int) (int, error) {
		if v == nil {
			return 0, nil
		}
		if *v < 1 {
			return 0, fmt.Errorf("%s %d: want at least 1", name, *v)
		}
		return *v, nil
	}
	if raw.Method != nil {
		if *raw.Method == "" {
			return c, fmt.Errorf("method is empty: want %s", methodList())
		}
		c.Method = Method(*raw.Method)
	}
	if raw.Model != nil {
		if *raw.Model == "" {
			return c, fmt.Errorf("model is empty: want a draft model (a file, a folder, hf:ORG/REPO or synth:SHAPE)")
		}
		c.Model = *raw.Model
	}
	if raw.NumSpeculativeTokens == nil {
		return c, fmt.Errorf("num_speculative_tokens is missing: want 1..%d", engine.MaxSpeculativeTokens)
	}
	c.NumSpeculativeTokens = *raw.NumSpeculativeTokens
	if c.PromptLookupMin, err = positive("prompt_lookup_min", raw.PromptLookupMin); err != nil {
		return c, err
	}
	if c.PromptLookupMax, err = positive("prompt_lookup_max", raw.PromptLookupMax); err != nil {
		return c, err
	}
	if c.DraftLayers, err = positive("draft_layers", raw.DraftLayers); err != nil {
		return c, err
	}
	c.DisableDynamic = raw.Dynamic != nil && !*raw.Dynamic
	return c, nil
}

// objectKeys returns the keys of the JSON object data holds, in order, refusing anything
// that is not one object.
func objectKeys(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("want a JSON object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, not %s", describeToken(tok))
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, unexpectedEnd(err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("want a key, not %s", describeToken(tok))
		}
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, fmt.Errorf("key %q: %w", k, unexpectedEnd(err))
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("the object does not end: %w", unexpectedEnd(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("want one JSON object, found more after it")
	}
	return keys, nil
}

// unexpectedEnd turns the end of the input inside the object into io.ErrUnexpectedEOF.
func unexpectedEnd(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// describeToken names a JSON token for an error message.
func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return fmt.Sprintf("%q", string(t))
	case string:
		return fmt.Sprintf("the string %q", t)
	default:
		return fmt.Sprintf("%v", t)
	}
}

// wantType says what a key's value must be.
func wantType(key string) string {
	switch key {
	case "method", "model":
		return "a string"
	case "dynamic":
		return "true or false"
	}
	return "a whole number"
}

// quoteAll quotes and joins names.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// methodList lists the methods kvasir runs.
func methodList() string {
	return fmt.Sprintf("%s, %s or %s", MethodNGram, MethodDraftModel, MethodLayerSkip)
}

// Check validates c and returns it with its defaults filled in: the method inferred when
// none is given (a Model whose name is "ngram" or "[ngram]" means ngram, as in vLLM), the
// prompt lookup lengths of ngram (vLLM's defaults, or the one given for both). It refuses
// an unknown method, K outside 1..engine.MaxSpeculativeTokens, a missing field the method
// needs, a field of another method, and negative values.
func (c Config) Check() (Config, error) {
	fail := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("speculative config: "+format, args...)
	}
	if c.NumSpeculativeTokens < 1 || c.NumSpeculativeTokens > engine.MaxSpeculativeTokens {
		return fail("num_speculative_tokens %d: want 1..%d", c.NumSpeculativeTokens, engine.MaxSpeculativeTokens)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"prompt_lookup_min", c.PromptLookupMin}, {"prompt_lookup_max", c.PromptLookupMax}, {"draft_layers", c.DraftLayers}} {
		if f.v < 0 {
			return fail("%s %d: want at least 1", f.name, f.v)
		}
	}
	lookup := c.PromptLookupMin > 0 || c.PromptLookupMax > 0
	if c.Method == "[ngram]" {
		c.Method = MethodNGram
	}
	if c.Model == "ngram" || c.Model == "[ngram]" {
		if c.Method != "" && c.Method != MethodNGram {
			return fail("model %q names the ngram method, but method is %q", c.Model, c.Method)
		}
		c.Method, c.Model = MethodNGram, ""
	}
	if c.Proposer != nil {
		if c.Method != "" || c.Model != "" || c.DraftLayers != 0 || lookup {
			return fail("a custom Proposer takes no method, model, draft_layers or prompt lookup lengths")
		}
		return c, nil
	}
	if c.Method == "" {
		var given []Method
		if c.Model != "" {
			given = append(given, MethodDraftModel)
		}
		if c.DraftLayers != 0 {
			given = append(given, MethodLayerSkip)
		}
		if lookup {
			given = append(given, MethodNGram)
		}
		switch len(given) {
		case 0:
			return fail("no method: give method (%s) or a draft model", methodList())
		case 1:
			c.Method = given[0]
		default:
			return fail("no method, and fields of several (%s and %s): give method", given[0], given[1])
		}
	}
	// other names a field given that belongs to another method than c.Method.
	other := func() string {
		switch {
		case c.Model != "" && c.Method != MethodDraftModel:
			return "model"
		case c.DraftLayers != 0 && c.Method != MethodLayerSkip:
			return "draft_layers"
		case lookup && c.Method != MethodNGram:
			if c.PromptLookupMin > 0 {
				return "prompt_lookup_min"
			}
			return "prompt_lookup_max"
		}
		return ""
	}
	switch c.Method {
	case MethodNGram:
		switch {
		case c.PromptLookupMin == 0 && c.PromptLookupMax == 0:
			c.PromptLookupMin, c.PromptLookupMax = DefaultPromptLookupMin, DefaultPromptLookupMax
		case c.PromptLookupMin == 0:
			c.PromptLookupMin = c.PromptLookupMax
		case c.PromptLookupMax == 0:
			c.PromptLookupMax = c.PromptLookupMin
		}
		if c.PromptLookupMin > c.PromptLookupMax {
			return fail("prompt_lookup_min %d is more than prompt_lookup_max %d", c.PromptLookupMin, c.PromptLookupMax)
		}
	case MethodDraftModel:
		if c.Model == "" {
			return fail("method %s needs model (the draft: a file, a folder, hf:ORG/REPO or synth:SHAPE)", c.Method)
		}
	case MethodLayerSkip:
		if c.DraftLayers == 0 {
			return fail("method %s needs draft_layers (how many of the target's first layers draft)", c.Method)
		}
	default:
		if slices.Contains(vllmMethods, string(c.Method)) {
			return fail("method %q is vLLM's but kvasir does not run it: want %s", c.Method, methodList())
		}
		return fail("unknown method %q: want %s", c.Method, methodList())
	}
	if f := other(); f != "" {
		return fail("%s does not go with method %s", f, c.Method)
	}
	return c, nil
}

// String describes a checked configuration for a start-up log line, such as
// "ngram (n-grams of 3..5 tokens), up to 4 draft tokens, dynamic".
func (c Config) String() string {
	var what string
	switch {
	case c.Proposer != nil:
		what = fmt.Sprintf("a custom proposer (%T)", c.Proposer)
	case c.Method == MethodNGram:
		what = fmt.Sprintf("ngram (n-grams of %d..%d tokens)", c.PromptLookupMin, c.PromptLookupMax)
	case c.Method == MethodDraftModel:
		what = fmt.Sprintf("draft_model %s", c.Model)
	case c.Method == MethodLayerSkip:
		what = fmt.Sprintf("layer_skip (the first %d layers)", c.DraftLayers)
	default:
		what = string(c.Method)
	}
	lens := "dynamic"
	if c.DisableDynamic {
		lens = "fixed"
	}
	return fmt.Sprintf("%s, up to %d draft tokens, %s", what, c.NumSpeculativeTokens, lens)
}
