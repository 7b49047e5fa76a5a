package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/encoder"
)

// newEmbedEnv starts an httptest server of a synthesized encoder alone: bert-tiny, or its
// cross-encoder twin when reranker.
func newEmbedEnv(t testing.TB, reranker bool) (*testEnv, *kvasir.Embedder) {
	t.Helper()
	shape := "bert-tiny"
	if reranker {
		shape = "bert-tiny-reranker"
	}
	c, _ := encoder.SynthConfig(shape)
	c.MaxPositions = 64
	path := filepath.Join(t.TempDir(), shape+".gguf")
	if err := encoder.WriteSynth(path, shape, c, 5); err != nil {
		t.Fatal(err)
	}
	emb, err := kvasir.OpenEmbedder(path, kvasir.EmbedderOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emb.Close() })
	srv, err := New(nil, Config{Embedder: emb, ModelNames: []string{testModelName}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &testEnv{srv: srv, ts: ts}, emb
}

type embedResponse struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (r *embedResponse) floats(t *testing.T, i int) []float32 {
	t.Helper()
	var v []float32
	if err := json.Unmarshal(r.Data[i].Embedding, &v); err != nil {
		t.Fatalf("data[%d].embedding: %v", i, err)
	}
	return v
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestEmbeddingsShapes(t *testing.T) {
	env, emb := newEmbedEnv(t, false)
	texts := []string{"hello world", "the quick brown fox", "paris"}
	var raw embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": texts, "normalize": false}, &raw)
	if raw.Object != "list" || raw.Model != testModelName || len(raw.Data) != 3 {
		t.Fatalf("response %+v", raw)
	}
	tokens := 0
	for i, text := range texts {
		ids, err := emb.Tokenize(text)
		if err != nil {
			t.Fatal(err)
		}
		tokens += len(ids)
		if raw.Data[i].Index != i || raw.Data[i].Object != "embedding" {
			t.Errorf("data[%d] = index %d object %q", i, raw.Data[i].Index, raw.Data[i].Object)
		}
		// The same input as token ids, and alone, gives the same vector.
		var byIDs embedResponse
		env.post(t, "/v1/embeddings", map[string]any{"input": ids, "normalize": false}, &byIDs)
		closeTo(t, "ids of "+text, byIDs.floats(t, 0), raw.floats(t, i), 1e-5)
		// Normalized (the default): unit length, the same direction.
		var unit embedResponse
		env.post(t, "/v1/embeddings", map[string]any{"input": text}, &unit)
		u, r := unit.floats(t, 0), raw.floats(t, i)
		if n := norm(u); math.Abs(n-1) > 1e-5 {
			t.Errorf("%q: normalized embedding has norm %v", text, n)
		}
		n := norm(r)
		for j := range u {
			if math.Abs(float64(u[j])-float64(r[j])/n) > 1e-5 {
				t.Fatalf("%q: normalized[%d] = %v, raw/norm %v", text, j, u[j], float64(r[j])/n)
			}
		}
		// Matryoshka: the first 16 values, renormalized.
		var short embedResponse
		env.post(t, "/v1/embeddings", map[string]any{"input": text, "dimensions": 16}, &short)
		s := short.floats(t, 0)
		n16 := norm(r[:16])
		if len(s) != 16 {
			t.Fatalf("dimensions 16: %d values", len(s))
		}
		for j := range s {
			if math.Abs(float64(s[j])-float64(r[j])/n16) > 1e-5 {
				t.Fatalf("%q: dimensions 16 [%d] = %v, want %v", text, j, s[j], float64(r[j])/n16)
			}
		}
		// base64: little-endian float32s of the same values.
		var b64 embedResponse
		env.post(t, "/v1/embeddings", map[string]any{"input": text, "encoding_format": "base64"}, &b64)
		var str string
		if err := json.Unmarshal(b64.Data[0].Embedding, &str); err != nil {
			t.Fatalf("base64 embedding is not a string: %s", b64.Data[0].Embedding)
		}
		bs, err := base64.StdEncoding.DecodeString(str)
		if err != nil || len(bs) != 4*emb.Dim() {
			t.Fatalf("base64: %d bytes, %v", len(bs), err)
		}
		dec := make([]float32, emb.Dim())
		for j := range dec {
			dec[j] = math.Float32frombits(binary.LittleEndian.Uint32(bs[4*j:]))
		}
		closeTo(t, "base64 of "+text, dec, u, 0)
	}
	if raw.Usage.PromptTokens != tokens || raw.Usage.TotalTokens != tokens {
		t.Errorf("usage %+v, want %d prompt tokens", raw.Usage, tokens)
	}
	// A batch of token-id lists.
	var batch embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": [][]int{{2, 50, 3}, {2, 60, 61, 3}}}, &batch)
	if len(batch.Data) != 2 || batch.Usage.PromptTokens != 7 {
		t.Errorf("token-id batch: %d embeddings, usage %+v", len(batch.Data), batch.Usage)
	}
}

// TestEmbeddingsRefuses: bad inputs get a 400 naming the field and the reason.
func TestEmbeddingsRefuses(t *testing.T) {
	env, _ := newEmbedEnv(t, false)
	long := strings.Repeat("hello ", 100)
	for _, c := range []struct {
		body, param, reason string
	}{
		{`{"input": ""}`, "input[0]", "empty"},
		{`{"input": []}`, "input", "empty"},
		{`{"input": [[]]}`, "input[0]", "empty"},
		{`{}`, "input", "required"},
		{`{"input": 1.5}`, "input", "must be a string"},
		{`{"input": [1.5]}`, "input", "must be a string"},
		{`{"input": [1, "a"]}`, "input", "must be a string"},
		{`{"input": {"text": "a"}}`, "input", "must be a string"},
		{`{"input": [[2, 3], ["a"]]}`, "input", "must be a string"},
		{`{"input": "` + long + `"}`, "input[0]", "more than the model's maximum of 64"},
		{`{"input": [` + strings.TrimSuffix(strings.Repeat("5,", 65), ",") + `]}`, "input[0]", "more than the model's maximum of 64"},
		{`{"input": [2, 999999]}`, "input[0]", "outside the vocabulary"},
		{`{"input": [2, -1]}`, "input[0]", "outside the vocabulary"},
		{`{"input": "a", "dimensions": 0}`, "dimensions", "want 1 to 128"},
		{`{"input": "a", "dimensions": 129}`, "dimensions", "want 1 to 128"},
		{`{"input": "a", "encoding_format": "int8"}`, "encoding_format", "want float or base64"},
		{`{"input": "a", "normalize": "yes"}`, "normalize", ""},
	} {
		status, body := env.do(t, http.MethodPost, "/v1/embeddings", []byte(c.body))
		var e errorBody
		if status != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error == nil {
			t.Errorf("%s: status %d: %s", c.body[:min(len(c.body), 60)], status, body)
			continue
		}
		if e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.reason) || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: error %+v, want param %q and %q", c.body[:min(len(c.body), 60)], e.Error, c.param, c.reason)
		}
	}
	// The generation endpoints of an encoder's server say what it serves.
	status, body := env.do(t, http.MethodPost, "/v1/chat/completions", []byte(`{"messages": [{"role": "user", "content": "hi"}]}`))
	if status != http.StatusBadRequest || !strings.Contains(string(body), "embedding model") {
		t.Errorf("chat on an encoder: %d %s", status, body)
	}
}

// TestEmbeddingsOnGenerativeModel: a decoder's server refuses the three endpoints.
func TestEmbeddingsOnGenerativeModel(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for path, body := range map[string]string{
		"/v1/embeddings": `{"input": "hello"}`,
		"/v1/rerank":     `{"query": "a", "documents": ["b"]}`,
		"/v1/score":      `{"text_1": "a", "text_2": "b"}`,
	} {
		status, b := env.do(t, http.MethodPost, path, []byte(body))
		if status != http.StatusBadRequest || !strings.Contains(string(b), "generative model") {
			t.Errorf("%s: %d %s", path, status, b)
		}
	}
}

type rerankResponse struct {
	Results []struct {
		Index          int      `json:"index"`
		RelevanceScore float64  `json:"relevance_score"`
		Document       *docText `json:"document"`
	} `json:"results"`
	Usage struct {
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

type scoreResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Index  int     `json:"index"`
		Object string  `json:"object"`
		Score  float64 `json:"score"`
	} `json:"data"`
}

// TestRerankAndScoreByEmbeddings: without a head, relevance is the cosine of the
// embeddings, which the test computes from /v1/embeddings.
func TestRerankAndScoreByEmbeddings(t *testing.T) {
	env, _ := newEmbedEnv(t, false)
	query, docs := "capital of france", []string{"paris", "the lazy dog", "a city on a river", "hello world"}
	var e embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": append([]string{query}, docs...)}, &e)
	want := make([]float64, len(docs))
	q := e.floats(t, 0)
	for i := range docs {
		want[i] = cosine(q, e.floats(t, i+1)) // unit vectors: the dot product is the cosine
	}
	var rr rerankResponse
	env.post(t, "/v1/rerank", map[string]any{"query": query, "documents": []any{docs[0], map[string]string{"text": docs[1]}, docs[2], docs[3]}, "top_n": 3}, &rr)
	if len(rr.Results) != 3 {
		t.Fatalf("top_n 3: %d results", len(rr.Results))
	}
	for i, r := range rr.Results {
		if math.Abs(r.RelevanceScore-want[r.Index]) > 1e-5 || r.Document == nil || r.Document.Text != docs[r.Index] {
			t.Errorf("result %d: %+v, want score %v and document %q", i, r, want[r.Index], docs[r.Index])
		}
		if i > 0 && r.RelevanceScore > rr.Results[i-1].RelevanceScore {
			t.Errorf("results not by descending score: %+v", rr.Results)
		}
	}
	var noDocs rerankResponse
	env.post(t, "/rerank", map[string]any{"query": query, "documents": docs, "return_documents": false}, &noDocs)
	if len(noDocs.Results) != len(docs) || noDocs.Results[0].Document != nil {
		t.Errorf("return_documents false: %+v", noDocs.Results)
	}
	var sc scoreResponse
	env.post(t, "/v1/score", map[string]any{"text_1": query, "text_2": docs}, &sc)
	if sc.Object != "list" || len(sc.Data) != len(docs) {
		t.Fatalf("score: %+v", sc)
	}
	for i, d := range sc.Data {
		if d.Index != i || d.Object != "score" || math.Abs(d.Score-want[i]) > 1e-5 {
			t.Errorf("score data[%d] = %+v, want %v", i, d, want[i])
		}
	}
	// Lists of one length pair up.
	var pairs scoreResponse
	env.post(t, "/score", map[string]any{"text_1": []string{query, query}, "text_2": docs[:2]}, &pairs)
	for i, d := range pairs.Data {
		if math.Abs(d.Score-want[i]) > 1e-5 {
			t.Errorf("paired score %d = %v, want %v", i, d.Score, want[i])
		}
	}
	for path, body := range map[string]string{
		"/v1/rerank": `{"query": "", "documents": ["a"]}`,
		"/rerank":    `{"query": "a", "documents": []}`,
		"/v2/rerank": `{"query": "a", "documents": [1]}`,
		"/v1/score":  `{"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}`,
		"/score":     `{"text_1": "a", "text_2": [""]}`,
	} {
		if status, b := env.do(t, http.MethodPost, path, []byte(body)); status != http.StatusBadRequest {
			t.Errorf("%s %s: %d %s", path, body, status, b)
		}
	}
	if status, b := env.do(t, http.MethodPost, "/v1/rerank", []byte(`{"query": "a", "documents": ["b"], "top_n": 0}`)); status != http.StatusBadRequest {
		t.Errorf("top_n 0: %d %s", status, b)
	}
}

// TestRerankCrossEncoder: a model with a classifier head scores each pair through it; the
// rerank and score endpoints agree, and a pair beyond the model's length is refused.
func TestRerankCrossEncoder(t *testing.T) {
	env, emb := newEmbedEnv(t, true)
	if !emb.HasClassifier() {
		t.Fatal("the reranker has no classifier")
	}
	query, docs := "capital of france", []string{"paris", "the lazy dog", "hello world"}
	var sc scoreResponse
	env.post(t, "/v1/score", map[string]any{"text_1": query, "text_2": docs}, &sc)
	var rr rerankResponse
	env.post(t, "/v1/rerank", map[string]any{"query": query, "documents": docs}, &rr)
	distinct := map[float64]bool{}
	for _, r := range rr.Results {
		s := sc.Data[r.Index].Score
		if math.Abs(r.RelevanceScore-s) > 1e-6 || s <= 0 || s >= 1 {
			t.Errorf("document %d: rerank %v, score %v (want equal, in (0, 1))", r.Index, r.RelevanceScore, s)
		}
		distinct[s] = true
	}
	if len(distinct) != len(docs) {
		t.Errorf("scores %+v: want one per document", sc.Data)
	}
	// The pair's segments matter: swapping query and document changes the score.
	var swapped scoreResponse
	env.post(t, "/v1/score", map[string]any{"text_1": docs[0], "text_2": query}, &swapped)
	if swapped.Data[0].Score == sc.Data[0].Score {
		t.Errorf("score(%q, %q) = score(%q, %q) = %v", query, docs[0], docs[0], query, swapped.Data[0].Score)
	}
	status, b := env.do(t, http.MethodPost, "/v1/score", []byte(`{"text_1": "a", "text_2": "`+strings.Repeat("dog ", 70)+`"}`))
	if status != http.StatusBadRequest || !strings.Contains(string(b), "context_length_exceeded") {
		t.Errorf("long pair: %d %s", status, b)
	}
}

// TestTruncatePromptTokens: vLLM's truncate_prompt_tokens cuts texts from the right, their
// final [SEP] kept, and token-id inputs to their first N ids, instead of refusing them.
func TestTruncatePromptTokens(t *testing.T) {
	env, emb := newEmbedEnv(t, false)
	long := strings.Repeat("hello world ", 50)
	ids, err := emb.Tokenize(long)
	if err != nil {
		t.Fatal(err)
	}
	cut := append(append([]int32(nil), ids[:7]...), ids[len(ids)-1])
	var a, b embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": long, "truncate_prompt_tokens": 8}, &a)
	env.post(t, "/v1/embeddings", map[string]any{"input": cut}, &b)
	if a.Usage.PromptTokens != 8 {
		t.Errorf("usage %+v, want 8 tokens", a.Usage)
	}
	closeTo(t, "truncated text", a.floats(t, 0), b.floats(t, 0), 1e-6)
	var c, d embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": ids, "truncate_prompt_tokens": -1}, &c)
	env.post(t, "/v1/embeddings", map[string]any{"input": ids[:emb.MaxLen()]}, &d)
	if c.Usage.PromptTokens != emb.MaxLen() {
		t.Errorf("-1: usage %+v, want %d", c.Usage, emb.MaxLen())
	}
	closeTo(t, "truncated ids", c.floats(t, 0), d.floats(t, 0), 1e-6)
	for _, n := range []int{0, -2, emb.MaxLen() + 1} {
		body, _ := json.Marshal(map[string]any{"input": "a", "truncate_prompt_tokens": n})
		if status, b := env.do(t, http.MethodPost, "/v1/embeddings", body); status != http.StatusBadRequest || !strings.Contains(string(b), "truncate_prompt_tokens") {
			t.Errorf("truncate_prompt_tokens %d: %d %s", n, status, b)
		}
	}
	rr, _ := newEmbedEnv(t, true)
	var sc scoreResponse
	rr.post(t, "/v1/score", map[string]any{"text_1": "a", "text_2": long, "truncate_prompt_tokens": -1}, &sc)
	if len(sc.Data) != 1 || sc.Data[0].Score <= 0 || sc.Data[0].Score >= 1 {
		t.Errorf("truncated pair: %+v", sc)
	}
}

// TestEmbeddingMetrics: /metrics counts the encoder's requests, inputs, tokens and forwards.
func TestEmbeddingMetrics(t *testing.T) {
	env, _ := newEmbedEnv(t, false)
	var r embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": [][]int{{2, 50, 3}, {2, 3}}}, &r)
	status, body := env.do(t, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	for _, want := range []string{
		`kvasir:embedding_requests_total{model_name="tiny"} 1`,
		`kvasir:embedding_inputs_total{model_name="tiny"} 2`,
		`kvasir:embedding_prompt_tokens_total{model_name="tiny"} 5`,
		`kvasir:embedding_forwards_total{model_name="tiny"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestOllamaEmbed: ollama's /api/embed gives the L2-normalized embeddings /v1/embeddings
// gives, the older /api/embeddings the model's own vector; a server of an encoder answers
// the generation endpoints of every API with a 400, not a crash.
func TestOllamaEmbed(t *testing.T) {
	env, _ := newEmbedEnv(t, false)
	texts := []string{"hello world", "paris"}
	var want embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": texts}, &want)
	var got struct {
		Model           string      `json:"model"`
		Embeddings      [][]float32 `json:"embeddings"`
		PromptEvalCount int         `json:"prompt_eval_count"`
	}
	env.post(t, "/api/embed", map[string]any{"model": testModelName + ":latest", "input": texts}, &got)
	if got.Model != testModelName || len(got.Embeddings) != 2 || got.PromptEvalCount != want.Usage.PromptTokens {
		t.Fatalf("/api/embed: model %q, %d embeddings, %d tokens; want 2 and %d tokens", got.Model, len(got.Embeddings), got.PromptEvalCount, want.Usage.PromptTokens)
	}
	for i := range texts {
		closeTo(t, fmt.Sprintf("/api/embed embeddings[%d]", i), got.Embeddings[i], want.floats(t, i), 1e-6)
	}
	var raw embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": "paris", "normalize": false}, &raw)
	var legacy struct {
		Embedding []float32 `json:"embedding"`
	}
	env.post(t, "/api/embeddings", map[string]any{"prompt": "paris"}, &legacy)
	closeTo(t, "/api/embeddings embedding", legacy.Embedding, raw.floats(t, 0), 1e-6)

	for path, body := range map[string]string{
		"/api/embed":           `{"model": "other", "input": "x"}`,
		"/api/embeddings":      `{"input": "x"}`,
		"/api/generate":        `{"prompt": "x"}`,
		"/api/chat":            `{"messages": []}`,
		"/api/show":            `{}`,
		"/completion":          `{"prompt": "x"}`,
		"/v1/responses":        `{"input": "x"}`,
		"/v1/chat/completions": `{"messages": [{"role": "user", "content": "x"}]}`,
	} {
		status, b := env.do(t, http.MethodPost, path, []byte(body))
		if status != http.StatusBadRequest && status != http.StatusNotFound {
			t.Errorf("%s: %d %s, want a 400 or 404", path, status, b)
		}
	}
	for _, path := range []string{"/api/tags", "/api/ps", "/props"} {
		if status, b := env.do(t, http.MethodGet, path, nil); status != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", path, status, b)
		}
	}
}

// TestOllamaEmbedOnGenerativeModel: a generative model's server answers /api/embed with
// ollama's error shape and a 400.
func TestOllamaEmbedOnGenerativeModel(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	status, b := env.do(t, http.MethodPost, "/api/embed", []byte(`{"input": "hello"}`))
	if status != http.StatusBadRequest || !strings.Contains(string(b), `"error"`) || !strings.Contains(string(b), "generative model") {
		t.Errorf("/api/embed: %d %s", status, b)
	}
}

// TestServeEncoderWithStats: an encoder-only server runs under Serve with the stats line
// on (it has no engine to report: the stats logger once dereferenced the missing engine
// and took the process down at start).
func TestServeEncoderWithStats(t *testing.T) {
	env, emb := newEmbedEnv(t, false)
	env.ts.Close()
	srv, err := New(nil, Config{Embedder: emb, ModelNames: []string{testModelName},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StatsInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, time.Second) }()
	time.Sleep(10 * time.Millisecond) // several stats intervals
	res, err := http.Post("http://"+ln.Addr().String()+"/v1/embeddings", "application/json",
		strings.NewReader(`{"input":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d", res.StatusCode)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
