package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// Relevance of texts to a query: with a cross-encoder (a model with a classifier head) each
// (query, document) pair runs through the model as one input, [CLS] query [SEP] document
// [SEP], and its score is the sigmoid of the head's logit; with an embedding model the
// score is the cosine similarity of the two texts' embeddings.

// rerankRequest is the Jina/Cohere POST /v1/rerank body.
type rerankRequest struct {
	Model string `json:"model"`
	Query string `json:"query"`
	// Documents are strings or {"text": ...} objects.
	Documents       []json.RawMessage `json:"documents"`
	TopN            *int              `json:"top_n"`
	ReturnDocuments *bool             `json:"return_documents"`
	// TruncatePromptTokens (vLLM) cuts each input (a pair, for a cross-encoder) to this
	// many tokens (-1: the model's maximum) instead of refusing a longer one.
	TruncatePromptTokens *int `json:"truncate_prompt_tokens"`
}

type rerankResult struct {
	Index          int      `json:"index"`
	Document       *docText `json:"document,omitempty"`
	RelevanceScore float64  `json:"relevance_score"`
}

type docText struct {
	Text string `json:"text"`
}

// handleRerank answers POST /v1/rerank (and /rerank).
func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	var req rerankRequest
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	emb, apiErr := s.embedder("model")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if req.Query == "" {
		writeError(w, badRequest("query", "query is required and must not be empty"))
		return
	}
	if len(req.Documents) == 0 || len(req.Documents) > MaxEmbeddingInputs {
		writeError(w, badRequest("documents", "documents has %d items: want 1 to %d", len(req.Documents), MaxEmbeddingInputs))
		return
	}
	docs := make([]string, len(req.Documents))
	for i, raw := range req.Documents {
		var d docText
		raw = bytes.TrimSpace(raw)
		if json.Unmarshal(raw, &docs[i]) != nil {
			if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &d) != nil {
				writeError(w, badRequest(fmt.Sprintf("documents[%d]", i), "documents[%d] must be a string or an object with a text field", i))
				return
			}
			docs[i] = d.Text
		}
	}
	topN := len(docs)
	if req.TopN != nil {
		if *req.TopN < 1 {
			writeError(w, badRequest("top_n", "top_n %d: want at least 1", *req.TopN))
			return
		}
		topN = min(topN, *req.TopN)
	}
	limit, apiErr := truncation(emb, req.TruncatePromptTokens)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	scores, tokens, apiErr := s.relevance(r, emb, []string{req.Query}, docs, "query", "documents", limit)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	results := make([]rerankResult, len(docs))
	for i := range docs {
		results[i] = rerankResult{Index: i, RelevanceScore: scores[i]}
		if req.ReturnDocuments == nil || *req.ReturnDocuments {
			results[i].Document = &docText{Text: docs[i]}
		}
	}
	sort.SliceStable(results, func(a, b int) bool { return results[a].RelevanceScore > results[b].RelevanceScore })
	writeJSON(w, http.StatusOK, map[string]any{
		"id": newID("rerank-"), "model": s.modelName(), "results": results[:topN],
		"usage": map[string]int{"total_tokens": tokens},
	})
}

// scoreRequest is vLLM's POST /v1/score body: text_1 and text_2 are each a string or a
// list; one text_1 is scored against every text_2, or lists of equal length pair up.
type scoreRequest struct {
	Model string          `json:"model"`
	Text1 json.RawMessage `json:"text_1"`
	Text2 json.RawMessage `json:"text_2"`
	// TruncatePromptTokens is rerankRequest's.
	TruncatePromptTokens *int `json:"truncate_prompt_tokens"`
}

// handleScore answers POST /v1/score (and /score).
func (s *Server) handleScore(w http.ResponseWriter, r *http.Request) {
	var req scoreRequest
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	emb, apiErr := s.embedder("model")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	t1, apiErr := stringOrList(req.Text1, "text_1")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	t2, apiErr := stringOrList(req.Text2, "text_2")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if len(t1) != 1 && len(t1) != len(t2) {
		writeError(w, badRequest("text_2", "text_1 has %d texts and text_2 %d: give one text_1, or lists of the same length", len(t1), len(t2)))
		return
	}
	limit, apiErr := truncation(emb, req.TruncatePromptTokens)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	scores, tokens, apiErr := s.relevance(r, emb, t1, t2, "text_1", "text_2", limit)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	data := make([]map[string]any, len(scores))
	for i, sc := range scores {
		data[i] = map[string]any{"index": i, "object": "score", "score": sc}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": newID("score-"), "object": "list", "created": time.Now().Unix(), "model": s.modelName(), "data": data,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// stringOrList reads a string or a non-empty list of strings, none empty.
func stringOrList(raw json.RawMessage, param string) ([]string, *APIError) {
	var one string
	var list []string
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, badRequest(param, "%s is required", param)
	case json.Unmarshal(raw, &one) == nil:
		list = []string{one}
	case json.Unmarshal(raw, &list) == nil:
	default:
		return nil, badRequest(param, "%s must be a string or a list of strings", param)
	}
	if len(list) == 0 || len(list) > MaxEmbeddingInputs {
		return nil, badRequest(param, "%s has %d texts: want 1 to %d", param, len(list), MaxEmbeddingInputs)
	}
	for i, t := range list {
		if t == "" {
			return nil, badRequest(param, "%s[%d] is an empty string", param, i)
		}
	}
	return list, nil
}

// relevance scores every b[i] against a[0] (len(a) == 1) or a[i], each input cut to limit
// tokens when limit > 0, and counts the tokens run.
func (s *Server) relevance(r *http.Request, emb *kvasir.Embedder, a, b []string, paramA, paramB string, limit int) ([]float64, int, *APIError) {
	first := func(i int) (string, string) {
		if len(a) == 1 {
			return a[0], paramA
		}
		return a[i], fmt.Sprintf("%s[%d]", paramA, i)
	}
	if emb.HasClassifier() {
		pairs := make([]kvasir.EmbedInput, len(b))
		tokens := 0
		for i := range b {
			ta, pa := first(i)
			if apiErr := s.cfg.checkPromptBytes(pa, pa, len(ta)+len(b[i])); apiErr != nil {
				return nil, 0, apiErr
			}
			p, err := emb.TokenizePair(ta, b[i])
			if err != nil {
				return nil, 0, badRequest(pa, "%v", err)
			}
			p.Tokens, p.Types = truncateFramed(p.Tokens, p.Types, limit)
			if len(p.Tokens) > emb.MaxLen() {
				return nil, 0, tooLongInput(fmt.Sprintf("%s[%d]", paramB, i), len(p.Tokens), emb.MaxLen())
			}
			pairs[i], tokens = p, tokens+len(p.Tokens)
		}
		scores, err := emb.Score(r.Context(), pairs)
		if err != nil {
			return nil, 0, embedError(r.Context(), err, paramB)
		}
		out := make([]float64, len(scores))
		for i, sc := range scores {
			out[i] = float64(sc)
		}
		return out, tokens, nil
	}
	// An embedding model: cosine similarity of the embeddings, each text embedded once.
	var inputs []kvasir.EmbedInput
	tokens := 0
	add := func(text, param string) *APIError {
		toks, apiErr := s.tokenizeInput(emb, text, param, limit)
		if apiErr == nil {
			inputs, tokens = append(inputs, kvasir.EmbedInput{Tokens: toks}), tokens+len(toks)
		}
		return apiErr
	}
	for i, t := range a {
		if apiErr := add(t, fmt.Sprintf("%s[%d]", paramA, i)); apiErr != nil {
			return nil, 0, apiErr
		}
	}
	for i, t := range b {
		if apiErr := add(t, fmt.Sprintf("%s[%d]", paramB, i)); apiErr != nil {
			return nil, 0, apiErr
		}
	}
	vecs, err := emb.Embed(r.Context(), inputs)
	if err != nil {
		return nil, 0, embedError(r.Context(), err, paramB)
	}
	out := make([]float64, len(b))
	for i := range b {
		va := vecs[0]
		if len(a) > 1 {
			va = vecs[i]
		}
		out[i] = cosine(va, vecs[len(a)+i])
	}
	return out, tokens, nil
}

// cosine returns the cosine similarity of a and b (0 when either is all zeros).
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
