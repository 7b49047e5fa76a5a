package server

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestDecoderEmbeddings serves a small qwen3 decoder with last-token pooling: texts and
// token ids get the embeddings the Embedder computes (normalized unless asked not to),
// rerank ranks by their cosine, and an input beyond the model's tokens is a 400.
func TestDecoderEmbeddings(t *testing.T) {
	s, err := synth.Lookup("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	c := s.Config
	c.VocabSize, c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFNDim, c.RopeDim = 300, 64, 1, 4, 2, 16, 128, 16
	c = synth.Rederive(c)
	tensors, err := synth.Tensors(c, quant.F32, 2, synth.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := synth.ByteVocab(c.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "qwen3.gguf")
	if err := format.WriteGGUF(path, format.Contents{Name: "qwen3 embedding test", Config: c, Vocab: vocab}, quant.F32, tensors, nil); err != nil {
		t.Fatal(err)
	}
	emb, err := kvasir.OpenEmbedder(path, kvasir.EmbedderOptions{Pooling: "last", Threads: 2, MaxBatchTokens: 64})
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
	env := &testEnv{srv: srv, ts: ts}

	texts := []string{"hello world", "the quick brown fox", "paris"}
	var res embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": texts, "normalize": false}, &res)
	if len(res.Data) != 3 {
		t.Fatalf("%d embeddings for 3 texts", len(res.Data))
	}
	tokens := 0
	for i, text := range texts {
		ids, err := emb.Tokenize(text)
		if err != nil {
			t.Fatal(err)
		}
		tokens += len(ids)
		want, err := emb.Embed(context.Background(), []kvasir.EmbedInput{{Tokens: ids}})
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, "embedding of "+text, res.floats(t, i), want[0], 1e-5)
	}
	if res.Usage.PromptTokens != tokens {
		t.Errorf("prompt_tokens %d, want %d", res.Usage.PromptTokens, tokens)
	}
	var normed embedResponse
	env.post(t, "/v1/embeddings", map[string]any{"input": [][]int{{5, 6, 7}, {9}}}, &normed)
	for i := range normed.Data {
		if n := norm(normed.floats(t, i)); math.Abs(n-1) > 1e-5 {
			t.Errorf("token-id input %d: norm %v, want 1", i, n)
		}
	}
	var rr struct {
		Results []struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		} `json:"results"`
	}
	env.post(t, "/v1/rerank", map[string]any{"query": "paris", "documents": []string{"the quick brown fox", "paris"}}, &rr)
	if len(rr.Results) != 2 || rr.Results[0].Index != 1 || math.Abs(rr.Results[0].Score-1) > 1e-5 {
		t.Errorf("rerank of the query itself first with cosine 1: %+v", rr.Results)
	}
	long := "[" + strings.Repeat("5,", emb.MaxLen()) + "5]"
	if status, body := env.do(t, http.MethodPost, "/v1/embeddings", []byte(`{"input": [`+long+`]}`)); status != http.StatusBadRequest {
		t.Errorf("an input of %d tokens for a maximum of %d: status %d: %.200s", emb.MaxLen()+1, emb.MaxLen(), status, body)
	}
	// A client that goes away while its long input is in prefill: the engine frees its
	// blocks, and the next request is served.
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"input": [[` + strings.Repeat("7,", 3000) + `7]]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/embeddings", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for emb.Stats().UsedKVBlocks == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if emb.Stats().UsedKVBlocks == 0 {
		t.Fatal("the long input never held a block")
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled request got a response")
	}
	for emb.Stats().UsedKVBlocks != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := emb.Stats().UsedKVBlocks; n != 0 {
		t.Errorf("%d KV blocks held after the client went away", n)
	}
	env.post(t, "/v1/embeddings", map[string]any{"input": "after"}, &res)
	if len(res.Data) != 1 {
		t.Errorf("%d embeddings after the disconnect", len(res.Data))
	}
}
