package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// Tokenizer is the local tokenizer the benchmark uses to make prompts of exact token lengths
// and to count tokens when the server reports no usage.
type Tokenizer interface {
	// Encode returns the token ids of text, without BOS/EOS.
	Encode(text string) []int
	// Decode returns the text of ids, without special tokens.
	Decode(ids []int) string
	// NumTokens returns the vocabulary size.
	NumTokens() int
	// IsSpecial reports whether id is a control or unknown token.
	IsSpecial(id int) bool
}

// localTokenizer adapts the project's tokenizer to Tokenizer.
type localTokenizer struct{ t *tokenizer.Tokenizer }

// FromTokenizer wraps a kvasir tokenizer as the benchmark's Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return localTokenizer{t} }

func (l localTokenizer) Encode(text string) []int { return l.t.Encode(text, tokenizer.EncodeOptions{}) }
func (l localTokenizer) Decode(ids []int) string  { return l.t.Decode(ids, true) }
func (l localTokenizer) NumTokens() int           { return l.t.NumTokens() }
func (l localTokenizer) IsSpecial(id int) bool    { return l.t.IsSpecial(id) }

// ServerTokenizer tokenizes through the server's POST /tokenize and /detokenize, in
// vLLM's and kvasir's shape ({"model","prompt"} -> {"tokens"}; {"model","tokens"} ->
// {"prompt"}) or llama.cpp's ({"content"} -> {"tokens"}; {"tokens"} -> {"content"}).
type ServerTokenizer struct {
	client  *http.Client
	baseURL string
	model   string
	apiKey  string
	// canDecode is set when /detokenize answered.
	canDecode bool
}

// ProbeServerTokenizer returns a ServerTokenizer when the server at baseURL answers
// POST /tokenize, or nil when it does not.
func ProbeServerTokenizer(ctx context.Context, client *http.Client, baseURL, model, apiKey string) *ServerTokenizer {
	s := &ServerTokenizer{client: client, baseURL: strings.TrimRight(baseURL, "/"), model: model, apiKey: apiKey}
	ids, err := s.Encode(ctx, "Hello world")
	if err != nil || len(ids) == 0 {
		return nil
	}
	if text, err := s.decode(ctx, ids); err == nil && strings.Contains(text, "world") {
		s.canDecode = true
	}
	return s
}

// Encode returns the server's token ids for text, without special tokens.
func (s *ServerTokenizer) Encode(ctx context.Context, text string) ([]int, error) {
	var out struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	err := s.post(ctx, "/tokenize", map[string]any{"model": s.model, "prompt": text, "add_special_tokens": false}, &out)
	if err != nil {
		// llama.cpp's shape.
		if err2 := s.post(ctx, "/tokenize", map[string]any{"content": text}, &out); err2 != nil {
			return nil, err
		}
	}
	ids := make([]int, 0, len(out.Tokens))
	for _, raw := range out.Tokens {
		var id int
		if err := json.Unmarshal(raw, &id); err != nil {
			// llama.cpp with with_pieces: {"id": N, "piece": "..."}.
			var p struct {
				ID int `json:"id"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return nil, fmt.Errorf("tokenize: token %s: %w", raw, err)
			}
			id = p.ID
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// CanDecode reports whether the server answered POST /detokenize.
func (s *ServerTokenizer) CanDecode() bool { return s.canDecode }

// Decode returns the server's text for ids.
func (s *ServerTokenizer) Decode(ctx context.Context, ids []int) (string, error) {
	if !s.canDecode {
		return "", fmt.Errorf("detokenize: the server at %s has no /detokenize", s.baseURL)
	}
	return s.decode(ctx, ids)
}

func (s *ServerTokenizer) decode(ctx context.Context, ids []int) (string, error) {
	var out struct {
		Prompt  *string `json:"prompt"`
		Content *string `json:"content"`
	}
	if err := s.post(ctx, "/detokenize", map[string]any{"model": s.model, "tokens": ids}, &out); err != nil {
		return "", err
	}
	switch {
	case out.Prompt != nil:
		return *out.Prompt, nil
	case out.Content != nil:
		return *out.Content, nil
	}
	return "", fmt.Errorf("detokenize: answer has neither \"prompt\" nor \"content\"")
}

func (s *ServerTokenizer) post(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.baseURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.apiKey)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, errorMessage(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	return nil
}

// commonWords are the words of approximate prompts when no tokenizer is at hand: short
// common English words, most of them one token in any vocabulary.
var commonWords = strings.Fields(`the of and to in is you that it he was for on are as with his they
at be this have from or one had by word but not what all were we when your can said there use an
each which she do how their if will up other about out many then them these so some her would make
like him into time has look two more write go see number no way could people my than first water
been call who oil its now find long down day did get come made may part over new sound take only
little work know place year live me back give most very after thing our just name good sentence man
think say great where help through much before line right too mean old any same tell boy follow came
want show also around form three small set put end does another well large must big even such because
turn here why ask went men read need land different home us move try kind hand picture again change off
play spell air away animal house point page letter mother answer found study still learn should world`)

// PromptBuilder turns token sequences into request prompts. Datasets draw random "tokens"
// from it and hand it sequences; it knows whether those are real token ids (from a local
// tokenizer or the server's) and how to send them.
type PromptBuilder struct {
	// pool holds the token ids random prompts draw from; in word mode, indices into
	// commonWords.
	pool []int
	// real is set when pool holds token ids of the server's vocabulary.
	real bool
	tok  Tokenizer
	srv  *ServerTokenizer
	// sendIDs: send real ids as a token-id prompt (POST /v1/completions accepts them).
	sendIDs bool
}

// NewPromptBuilder picks how prompts are made: with a local tokenizer, random ids of its
// vocabulary (ordinary tokens that decode to valid text); else with a server /tokenize, the
// ids the server gives a text of common words; else common words, one assumed token each.
// With chat false, real ids are sent as token-id prompts; otherwise as decoded text.
func NewPromptBuilder(ctx context.Context, tok Tokenizer, srv *ServerTokenizer, chat bool) (*PromptBuilder, error) {
	b := &PromptBuilder{tok: tok, srv: srv}
	switch {
	case tok != nil:
		for id := range tok.NumTokens() {
			if tok.IsSpecial(id) {
				continue
			}
			s := tok.Decode([]int{id})
			if s == "" || !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
				continue
			}
			b.pool = append(b.pool, id)
		}
		if len(b.pool) == 0 {
			return nil, fmt.Errorf("prompts: the tokenizer has no ordinary token")
		}
		b.real, b.sendIDs = true, !chat
	case srv != nil && (!chat || srv.CanDecode()):
		ids, err := srv.Encode(ctx, " "+strings.Join(commonWords, " "))
		if err != nil {
			return nil, fmt.Errorf("prompts: %w", err)
		}
		seen := map[int]bool{}
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				b.pool = append(b.pool, id)
			}
		}
		if len(b.pool) < 2 {
			return nil, fmt.Errorf("prompts: the server's /tokenize gave %d distinct tokens", len(b.pool))
		}
		b.real, b.sendIDs = true, !chat
	default:
		for i := range commonWords {
			b.pool = append(b.pool, i)
		}
	}
	return b, nil
}

// Exact reports whether prompt lengths are exact token counts rather than estimates.
func (b *PromptBuilder) Exact() bool { return b.real && (b.sendIDs || b.tok != nil) }

// Draw returns n random tokens.
func (b *PromptBuilder) Draw(rng *rand.Rand, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = b.pool[rng.IntN(len(b.pool))]
	}
	return ids
}

// Build fills r's prompt from the token sequence ids.
func (b *PromptBuilder) Build(ctx context.Context, ids []int, r *SampleRequest) error {
	r.PromptLen = len(ids)
	switch {
	case !b.real:
		words := make([]string, len(ids))
		for i, id := range ids {
			words[i] = commonWords[id]
		}
		r.Prompt = strings.Join(words, " ")
	case b.sendIDs:
		r.TokenIDs = ids
	case b.tok != nil:
		r.Prompt = b.tok.Decode(ids)
		r.PromptLen = len(b.tok.Encode(r.Prompt))
	default:
		text, err := b.srv.Decode(ctx, ids)
		if err != nil {
			return err
		}
		r.Prompt = text
	}
	return nil
}

// Count returns the token count of text: exact with a tokenizer (local, then the server's),
// else an estimate of one token per four bytes.
func (b *PromptBuilder) Count(ctx context.Context, text string) int {
	if b.tok != nil {
		return len(b.tok.Encode(text))
	}
	if b.srv != nil {
		if ids, err := b.srv.Encode(ctx, text); err == nil {
			return len(ids)
		}
	}
	return (len(text) + 3) / 4
}
