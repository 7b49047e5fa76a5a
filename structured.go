package kvasir

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir/internal/structured"
	"github.com/kvasir-llm/kvasir/internal/structured/jsonschema"
)

// StructuredOutput holds a request's output to a formal language: exactly one of a JSON
// Schema, any JSON object, a regular expression, a list of choices or a grammar. Engine.
// Constrain compiles it into a Processor for Request.Processors.
type StructuredOutput struct {
	// JSONSchema is a JSON Schema document the output must be an instance of.
	JSONSchema json.RawMessage
	// JSONObject asks for any JSON object (OpenAI's response_format json_object).
	JSONObject bool
	// Regex is a regular expression the whole output must match.
	Regex string
	// Choice lists the outputs allowed.
	Choice []string
	// Grammar is a context-free grammar: llama.cpp's GBNF (recognized by its "::=") or a
	// Lark-like EBNF.
	Grammar string
	// WhitespacePattern is the JSON whitespace allowed between tokens of JSON output (a
	// regular expression matching bounded runs of space, tab, newline and carriage return,
	// such as `[ \t\n]{0,20}`); empty: none (compact JSON).
	WhitespacePattern string
	// Strict treats a JSON Schema object without additionalProperties as closed (OpenAI's
	// strict mode).
	Strict bool
	// Triggers, when set, make the constraint lazy (llama.cpp's lazy grammars): the output
	// is free until it contains one of them, and held to the language from the first one
	// on, the trigger included, so the language's strings must begin with a trigger. It is
	// how tool_choice "auto" holds a tool call, once begun, to the tools' schemas.
	Triggers []string
}

// ErrStructuredOutput wraps every error of a StructuredOutput that cannot be compiled: a
// bad or unsupported schema, regex or grammar, or one over the compile limits.
var ErrStructuredOutput = errors.New("structured output")

// grammarCacheSize is how many compiled grammars an engine keeps (least recently used
// evicted).
const grammarCacheSize = 256

// jsonObjectDepth bounds the nesting of response_format json_object output.
const jsonObjectDepth = 16

// Mask-time probe: a grammar is tried for probeTokens tokens of a random walk before its
// first request uses it, and refused when one mask takes longer than maxProbeMask. Masks
// are computed on the engine's loop, so a grammar whose masks take a good part of a second
// (a counted repetition too large for one automaton, such as a string of maxLength 2048,
// which the parser then counts out) would stall every request; the probe turns the first
// such masks into the request's 400. Later states of a grammar may still be slower.
const (
	probeTokens  = 16
	maxProbeMask = 50 * time.Millisecond
)

// grammars is an engine's compiled-grammar cache, whose entries the mask-time probe has
// judged, and its vocabulary's token trie, made on first use.
type grammars struct {
	once  sync.Once
	trie  *structured.TokenTrie
	err   error
	cache *structured.Cache
}

// Constrain compiles s for the engine's tokenizer and returns a fresh processor holding one
// request's output to it (a Masker: tokens that cannot continue the language are masked,
// end-of-generation is allowed exactly when the output is complete; with Triggers, only
// from the first trigger on). Compiles are cached
// by source and run on the caller's goroutine, never on the engine's loop, within time and
// size limits; a repeated schema costs one compile.
func (e *Engine) Constrain(s StructuredOutput) (Processor, error) {
	kind, src, fe, err := s.frontEnd()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStructuredOutput, err)
	}
	if e.l.tok == nil {
		return nil, fmt.Errorf("%w: the model has no tokenizer", ErrStructuredOutput)
	}
	g := &e.grammars
	g.once.Do(func() {
		g.trie, g.err = structured.NewTokenTrie(e.l.tok)
		g.cache = structured.NewCache(grammarCacheSize, structured.DefaultLimits(),
			func(tg *structured.TokenGrammar) error { return probeMasks(tg, e.l.tok, maxProbeMask) })
	})
	if g.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStructuredOutput, g.err)
	}
	tg, err := g.cache.Get(kind, fe, src, g.trie, e.l.tok)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStructuredOutput, err)
	}
	if len(s.Triggers) > 0 {
		z, err := tg.NewLazy(s.Triggers)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStructuredOutput, err)
		}
		return z, nil
	}
	return tg.NewMasker(), nil
}

// probeMasks walks tg for up to probeTokens random allowed tokens and reports a mask slower
// than limit (maxProbeMask; see the probe's constants).
func probeMasks(tg *structured.TokenGrammar, vocab structured.Vocabulary, limit time.Duration) error {
	m := tg.NewMasker()
	rng := rand.New(rand.NewPCG(1, 2))
	var allowed []int32
	for i := range probeTokens {
		t0 := time.Now()
		mask := m.Mask()
		if d := time.Since(t0); d > limit {
			return fmt.Errorf("too slow to hold generation to: a token mask took %v (at most %v; after %d tokens)", d.Round(time.Microsecond), limit, i)
		}
		if m.Done() || mask == nil {
			return nil
		}
		allowed = allowed[:0]
		for id := range int32(vocab.NumTokens()) {
			if mask.Allows(id) && !vocab.IsEOG(int(id)) {
				allowed = append(allowed, id)
			}
		}
		if len(allowed) == 0 {
			return nil
		}
		if err := m.Accept([]int32{allowed[rng.IntN(len(allowed))]}); err != nil {
			return nil
		}
	}
	return nil
}

// frontEnd returns the cache kind, source and front end of s, or why s is not one
// constraint.
func (s StructuredOutput) frontEnd() (kind string, src []byte, fe structured.FrontEnd, err error) {
	set := 0
	for _, b := range []bool{len(s.JSONSchema) > 0, s.JSONObject, s.Regex != "", s.Choice != nil, s.Grammar != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return "", nil, nil, fmt.Errorf("want exactly one of a JSON schema, a JSON object, a regex, a choice and a grammar (%d given)", set)
	}
	opt := jsonschema.Options{WhitespacePattern: s.WhitespacePattern, StrictProperties: s.Strict}
	// The options change the grammar, so they are part of the cache's key.
	jsonKind := fmt.Sprintf("json ws=%q strict=%v", s.WhitespacePattern, s.Strict)
	switch {
	case len(s.JSONSchema) > 0:
		return jsonKind, s.JSONSchema, jsonschema.FrontEnd(opt), nil
	case s.JSONObject:
		return "json_object " + jsonKind, []byte("{}"), func([]byte) (*structured.Grammar, error) {
			gbnf, err := jsonschema.JSONObjectGBNF(opt, jsonObjectDepth)
			if err != nil {
				return nil, err
			}
			return structured.ParseGBNF(gbnf)
		}, nil
	case s.Regex != "":
		return "regex", []byte(s.Regex), func(src []byte) (*structured.Grammar, error) { return structured.ParseRegex(string(src)) }, nil
	case s.Choice != nil:
		if len(s.Choice) == 0 {
			return "", nil, nil, errors.New("a choice needs at least one option")
		}
		src, err := json.Marshal(s.Choice)
		if err != nil {
			return "", nil, nil, err
		}
		return "choice", src, func(src []byte) (*structured.Grammar, error) {
			var options []string
			if err := json.Unmarshal(src, &options); err != nil {
				return nil, err
			}
			return structured.Choice(options)
		}, nil
	case strings.Contains(s.Grammar, "::="):
		return "gbnf", []byte(s.Grammar), func(src []byte) (*structured.Grammar, error) { return structured.ParseGBNF(string(src)) }, nil
	}
	return "ebnf", []byte(s.Grammar), func(src []byte) (*structured.Grammar, error) { return structured.ParseEBNF(string(src)) }, nil
}
