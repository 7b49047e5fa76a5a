package server

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestOpenAINpmEmbeddings serves a synthesized BERT encoder and runs
// test/openai/embeddings.test.mjs: the official openai npm client's embeddings.create, float
// and base64, and raw rerank and score requests. It skips only when node or npm is missing
// and KVASIR_REQUIRE_TESTDATA is unset.
func TestOpenAINpmEmbeddings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var env *testEnv
	var dim int
	node, dir := openAIClient(t, ctx, func(string) {
		e, emb := newEmbedEnv(t, false)
		env, dim = e, emb.Dim()
	})
	test := exec.CommandContext(ctx, node, "--test", "embeddings.test.mjs")
	test.Dir = dir
	test.Env = append(os.Environ(), "KVASIR_BASE_URL="+env.ts.URL+"/v1", "KVASIR_MODEL="+testModelName, "KVASIR_DIM="+strconv.Itoa(dim))
	out, err := test.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, tail(out, 12000))
	}
	t.Logf("openai client embedding tests passed (%s)", summary(out))
}
