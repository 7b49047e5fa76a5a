package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestLongCtx: on stories260K over text past its 512-token context, streaming with a
// budget above the text's length scores it exactly as full attention does; with a budget
// of 64 its KV peaks at 64 tokens while full attention's holds the whole text; and the
// table names every row.
func TestLongCtx(t *testing.T) {
	done := make(chan kvasir.RequestStats, 1)
	e := storiesEngine(t, kvasir.Options{MaxNumBatchedTokens: 1, MaxNumSeqs: 1, MaxModelLen: 720,
		OnRequestDone: func(st kvasir.RequestStats) { done <- st }})
	text, err := os.ReadFile(testdata.Path(t, "corpus/tinystories_excerpt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := e.Tokenize(string(text[:20000]), true)
	if err != nil {
		t.Fatal(err)
	}
	tokens = tokens[:600]
	o := LongCtxOptions{Policies: []string{"full", "streaming"}, Budgets: []int{64, 640}, SinkTokens: 4, TrainedCtx: 512}
	rows, err := LongCtx(context.Background(), e, tokens, o, done, e.BlockSize(), e.Loaded().Model().KVBytesPerToken())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want full + streaming at 2 budgets", len(rows))
	}
	full, narrow, wide := rows[0], rows[1], rows[2]
	if wide.Perplexity != full.Perplexity || wide.VsFull != 1 {
		t.Errorf("streaming within its budget: perplexity %v, full attention's %v", wide.Perplexity, full.Perplexity)
	}
	if full.Tokens != 599 || full.Perplexity < 1.5 || full.Perplexity > 30 || full.BeyondContext == 0 || full.WithinContext == 0 {
		t.Errorf("full attention: %+v", full)
	}
	if narrow.PeakKVTokens != 64 || full.PeakKVTokens < 600 || narrow.PeakKVBytes*int64(full.PeakKVTokens) != full.PeakKVBytes*64 {
		t.Errorf("peak KV: streaming at 64 %d tokens (%d B), full %d tokens (%d B)", narrow.PeakKVTokens, narrow.PeakKVBytes, full.PeakKVTokens, full.PeakKVBytes)
	}
	if narrow.Perplexity == full.Perplexity {
		t.Error("streaming at a budget of 64 scored the text as full attention: the budget did nothing")
	}
	var b bytes.Buffer
	WriteLongCtx(&b, rows, 512)
	if out := b.String(); strings.Count(out, "\nstreaming ") != 2 || !strings.Contains(out, "ppl>=512") {
		t.Errorf("table:\n%s", out)
	}
	if _, err := LongCtx(context.Background(), e, tokens, LongCtxOptions{Policies: []string{"streaming"}, Budgets: []int{8}}, done, 16, 1); err == nil {
		t.Error("a budget below the sinks and window was taken")
	}
}
