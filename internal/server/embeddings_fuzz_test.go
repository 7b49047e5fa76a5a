package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzEmbeddingRequests sends arbitrary bodies to /v1/embeddings, /v1/rerank and
// /v1/score of an encoder's server (the reranker: rerank and score run its head): each
// answer is 200 or a 400 in OpenAI's error shape, never a panic (a 500).
func FuzzEmbeddingRequests(f *testing.F) {
	for _, seed := range []string{
		`{"input":"hello world"}`, `{"input":["a","b"],"dimensions":8,"encoding_format":"base64"}`,
		`{"input":[2,50,3],"normalize":false}`, `{"input":[[2,50,3],[2,3]]}`, `{"input":[[],[1]]}`,
		`{"input":[1,"a"]}`, `{"input":[[1],["a"]]}`, `{"input":{"a":1}}`, `{"input":""}`, `{"input":null}`,
		`{"query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":false}`,
		`{"query":"q","documents":[{"text":1}]}`, `{"text_1":"a","text_2":["b","c"]}`, `{"text_1":["a"],"text_2":"b"}`,
		`{"text_1":[],"text_2":[]}`, `[]`, `null`, `{`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	env, _ := newEmbedEnv(f, true)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/embeddings", "/v1/rerank", "/v1/score"} {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			env.srv.ServeHTTP(rec, req)
			switch rec.Code {
			case http.StatusOK:
				if !json.Valid(rec.Body.Bytes()) {
					t.Fatalf("%s %q: 200 with a body that is not JSON", path, body)
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
				var e errorBody
				if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == nil || e.Error.Message == "" {
					t.Fatalf("%s %q: %d without an error body: %s", path, body, rec.Code, rec.Body)
				}
			default:
				t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body)
			}
		}
	})
}
