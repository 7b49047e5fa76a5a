package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// MaxEmbeddingInputs is the most inputs one /v1/embeddings request may carry (OpenAI's
// limit), and the most documents of a rerank or pairs of a score request.
const MaxEmbeddingInputs = 2048

// embeddingRequest is OpenAI's POST /v1/embeddings body, with vLLM's normalize.
type embeddingRequest struct {
	Model string `json:"model"`
	// Input is a string, an array of strings, an array of token ids or an array of arrays
	// of token ids.
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	// Normalize (vLLM) scales each embedding to unit length; default true.
	Normalize *bool  `json:"normalize"`
	User      string `json:"user"`
	// TruncatePromptTokens (vLLM) cuts longer inputs to this many tokens (-1: the model's
	// maximum) instead of refusing them.
	TruncatePromptTokens *int `json:"truncate_prompt_tokens"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   embeddingUsage  `json:"usage"`
}

// embedder returns the model's embedder, or the 400 for a generative model.
func (s *Server) embedder(param string) (*kvasir.Embedder, *APIError) {
	if s.cfg.Embedder == nil {
		return nil, badRequest(param, "the model %s is a generative model: it serves no embeddings, rerank or score (start kvasir serve with an encoder model, such as a BERT GGUF)", s.modelName())
	}
	return s.cfg.Embedder, nil
}

// handleEmbeddings answers POST /v1/embeddings.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	emb, apiErr := s.embedder("model")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	b64 := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		writeError(w, badRequest("encoding_format", "encoding_format %q: want float or base64", req.EncodingFormat))
		return
	}
	dims, apiErr := embeddingDims(emb, req.Dimensions)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	limit, apiErr := truncation(emb, req.TruncatePromptTokens)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	inputs, apiErr := s.embeddingInputs(emb, req.Input, limit)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	vecs, err := emb.Embed(r.Context(), inputs)
	if err != nil {
		writeError(w, embedError(r.Context(), err, "input"))
		return
	}
	res := embeddingResponse{ID: newID("embd-"), Object: "list", Created: time.Now().Unix(), Model: s.modelName()}
	normalize := req.Normalize == nil || *req.Normalize
	for i, v := range vecs {
		v = v[:dims]
		if normalize {
			v = unitLength(v)
		}
		d := embeddingData{Object: "embedding", Index: i, Embedding: v}
		if b64 {
			d.Embedding = base64Floats(v)
		}
		res.Data = append(res.Data, d)
		res.Usage.PromptTokens += len(inputs[i].Tokens)
	}
	res.Usage.TotalTokens = res.Usage.PromptTokens
	writeJSON(w, http.StatusOK, res)
}

// embeddingDims returns how many leading values of each embedding a request keeps: the
// model's all, or its dimensions field (Matryoshka truncation), which must be 1 to that.
func embeddingDims(emb *kvasir.Embedder, d *int) (int, *APIError) {
	if d == nil {
		return emb.Dim(), nil
	}
	if *d < 1 || *d > emb.Dim() {
		return 0, badRequest("dimensions", "dimensions %d: the model's embeddings have %d (want 1 to %d)", *d, emb.Dim(), emb.Dim())
	}
	return *d, nil
}

// embeddingInputs reads an embeddings request's input into token sequences: texts are
// tokenized with the model's [CLS] and [SEP]; token ids are taken as they are.
func (s *Server) embeddingInputs(emb *kvasir.Embedder, raw json.RawMessage, limit int) ([]kvasir.EmbedInput, *APIError) {
	const shapes = "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input is required")
	}
	var texts []string
	var ids [][]int64
	var elems []json.RawMessage
	bad := badRequest("input", "%s", shapes)
	switch {
	case raw[0] == '"':
		var one string
		if json.Unmarshal(raw, &one) != nil {
			return nil, bad
		}
		texts = []string{one}
	case raw[0] != '[' || json.Unmarshal(raw, &elems) != nil:
		return nil, bad
	case len(elems) == 0:
	case bytes.HasPrefix(bytes.TrimSpace(elems[0]), []byte(`"`)):
		if json.Unmarshal(raw, &texts) != nil {
			return nil, bad
		}
	case bytes.HasPrefix(bytes.TrimSpace(elems[0]), []byte(`[`)):
		if json.Unmarshal(raw, &ids) != nil {
			return nil, bad
		}
	default:
		var one []int64
		if json.Unmarshal(raw, &one) != nil {
			return nil, bad
		}
		ids = [][]int64{one}
	}
	n := len(texts) + len(ids)
	switch {
	case n == 0:
		return nil, badRequest("input", "input is empty: give at least one text or token")
	case n > MaxEmbeddingInputs:
		return nil, badRequest("input", "input has %d items, more than %d", n, MaxEmbeddingInputs)
	}
	var out []kvasir.EmbedInput
	for i, t := range texts {
		in, apiErr := s.tokenizeInput(emb, t, fmt.Sprintf("input[%d]", i), limit)
		if apiErr != nil {
			return nil, apiErr
		}
		out = append(out, kvasir.EmbedInput{Tokens: in})
	}
	for i, seq := range ids {
		param := fmt.Sprintf("input[%d]", i)
		if len(seq) == 0 {
			return nil, badRequest(param, "%s is an empty list of token ids", param)
		}
		if limit > 0 && len(seq) > limit {
			seq = seq[:limit]
		}
		if len(seq) > emb.MaxLen() {
			return nil, tooLongInput(param, len(seq), emb.MaxLen())
		}
		toks := make([]int32, len(seq))
		for j, id := range seq {
			if id < 0 || id >= int64(emb.VocabSize()) {
				return nil, badRequest(param, "%s[%d] = %d is outside the vocabulary of %d", param, j, id, emb.VocabSize())
			}
			toks[j] = int32(id)
		}
		out = append(out, kvasir.EmbedInput{Tokens: toks})
	}
	return out, nil
}

// truncation reads truncate_prompt_tokens: 0 (absent: refuse longer inputs), -1 (the
// model's maximum) or 1 to the maximum.
func truncation(emb *kvasir.Embedder, n *int) (int, *APIError) {
	switch {
	case n == nil:
		return 0, nil
	case *n == -1:
		return emb.MaxLen(), nil
	case *n < 1 || *n > emb.MaxLen():
		return 0, badRequest("truncate_prompt_tokens", "truncate_prompt_tokens %d: want -1 (the model's maximum) or 1 to %d", *n, emb.MaxLen())
	}
	return *n, nil
}

// truncateFramed cuts a [CLS] ... [SEP] input (a pair's types alongside, when not nil) to
// limit tokens from the right, keeping its final [SEP], as BERT tokenizers truncate.
func truncateFramed(toks, types []int32, limit int) ([]int32, []int32) {
	if limit <= 0 || len(toks) <= limit {
		return toks, types
	}
	if limit < 2 {
		return toks[:limit], types[:min(len(types), limit)]
	}
	toks = append(toks[:limit-1:limit-1], toks[len(toks)-1])
	if types != nil {
		types = append(types[:limit-1:limit-1], types[len(types)-1])
	}
	return toks, types
}

// tokenizeInput tokenizes one text input ([CLS] text [SEP]), refusing an empty text and,
// unless limit (truncate_prompt_tokens) cuts it, one longer than the model takes.
func (s *Server) tokenizeInput(emb *kvasir.Embedder, text, param string, limit int) ([]int32, *APIError) {
	if text == "" {
		return nil, badRequest(param, "%s is an empty string", param)
	}
	if apiErr := s.cfg.checkPromptBytes(param, param, len(text)); apiErr != nil {
		return nil, apiErr
	}
	toks, err := emb.Tokenize(text)
	if err != nil {
		return nil, badRequest(param, "%v: give token ids", err)
	}
	toks, _ = truncateFramed(toks, nil, limit)
	if len(toks) > emb.MaxLen() {
		return nil, tooLongInput(param, len(toks), emb.MaxLen())
	}
	return toks, nil
}

// tooLongInput is the 400 for an input beyond the model's positions.
func tooLongInput(param string, n, max int) *APIError {
	e := badRequest(param, "%s has %d tokens, more than the model's maximum of %d: shorten it", param, n, max)
	e.Code = "context_length_exceeded"
	return e
}

// embedError maps an error of the embedder to its API error.
func embedError(ctx context.Context, err error, param string) *APIError {
	switch {
	case ctx.Err() != nil:
		return &APIError{Status: 499, Type: "invalid_request_error", Message: "the client went away"}
	case errors.Is(err, kvasir.ErrTooLong):
		e := badRequest(param, "%v", err)
		e.Code = "context_length_exceeded"
		return e
	}
	return internalError(err)
}

// unitLength returns v scaled to unit L2 norm (v itself when it is all zeros).
func unitLength(v []float32) []float32 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return v
	}
	inv := 1 / math.Sqrt(ss)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// base64Floats encodes v as OpenAI's base64 embeddings: little-endian float32s.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// embeddingPaths are the endpoints of encoder models; their request bodies are JSON.
var embeddingPaths = map[string]bool{"/v1/embeddings": true, "/v1/rerank": true, "/rerank": true,
	"/v2/rerank": true, "/v1/score": true, "/score": true}

// embeddingRoutes adds the embedding, rerank and score endpoints (with vLLM's aliases).
func (s *Server) embeddingRoutes(mux *http.ServeMux) {
	mux.Handle("/v1/embeddings", method(http.MethodPost, s.handleEmbeddings))
	for _, p := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		mux.Handle(p, method(http.MethodPost, s.handleRerank))
	}
	for _, p := range []string{"/v1/score", "/score"} {
		mux.Handle(p, method(http.MethodPost, s.handleScore))
	}
}

// newEmbeddingServer makes a server for an encoder model alone (cfg.Embedder): the
// embedding endpoints, /v1/models, /health, /version and /metrics.
func newEmbeddingServer(cfg Config) (*Server, error) {
	emb := cfg.Embedder
	if emb == nil {
		return nil, errors.New("server: no engine and no embedder to serve")
	}
	if len(cfg.ModelNames) == 0 {
		cfg.ModelNames = []string{emb.ModelName()}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Version == "" {
		cfg.Version = buildVersion()
	}
	setDefaults(&cfg)
	cfg.Limits = cfg.Limits.withDefaults(emb.MaxLen())
	hosts, origins, err := cfg.policies()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, created: time.Now().Unix(), hosts: hosts, origins: origins}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(cfg.ModelNames[0])
	}
	if err := s.metrics.attachEmbedder(emb); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// generationPaths are the endpoints a server of an encoder model alone does not serve.
var generationPaths = map[string]bool{"/v1/completions": true, "/v1/chat/completions": true, "/tokenize": true, "/detokenize": true,
	"/v1/responses": true, "/api/generate": true, "/api/chat": true, "/api/show": true, "/api/tags": true, "/api/ps": true,
	"/completion": true, "/props": true, "/v1/kv_hashes/completions": true, "/v1/kv_hashes/chat/completions": true,
	"/v1/kv_prefill/completions": true, "/v1/kv_prefill/chat/completions": true, "/v1/kv_transfer": true}

// generationGuard answers the generation endpoints of a server of an encoder model alone
// (no engine) with a 400 saying what it serves; other requests go on to next.
func (s *Server) generationGuard(next http.Handler) http.Handler {
	if s.eng != nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !generationPaths[r.URL.Path] && !strings.HasPrefix(r.URL.Path, "/v1/responses/") {
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, badRequest("model", "the model %s is an embedding model: it serves /v1/embeddings, /v1/rerank and /v1/score, not %s", s.modelName(), r.URL.Path))
	})
}
