package bench

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/promptcompress"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestCompressRows runs bench compress on the trained draft (target and scorer at once):
// the rows hold what they say (the budget, the ratio of the times, perplexities of a real
// model), rate 1 keeps every token and scores the answer as the whole prompt does, and a
// text too short is refused.
func TestCompressRows(t *testing.T) {
	eng, err := kvasir.Open(testdata.Path(t, "models/trained/draft"), kvasir.Options{Threads: 2, DisablePrefixCaching: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	text, err := os.ReadFile(testdata.Path(t, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sc := promptcompress.EngineScorer{Engine: eng}
	ctx := context.Background()
	rows, err := Compress(ctx, eng, sc, string(text[:20000]), CompressOptions{Rate: 0.5, PromptTokens: []int{200}, AnswerTokens: 16, Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.KeptTokens < 80 || r.KeptTokens > 130 {
		t.Errorf("kept %d of 200 tokens at rate 0.5", r.KeptTokens)
	}
	if math.Abs(r.Speedup-r.TTFTFull/r.TTFTCompressed) > 1e-9 || r.ScoreSeconds >= r.TTFTCompressed {
		t.Errorf("row %+v: speedup or times inconsistent", r)
	}
	for _, p := range []float64{r.PerplexityFull, r.PerplexityCompressed, r.PerplexityTruncated} {
		if !(p > 1 && p < 1000) {
			t.Errorf("row %+v: perplexity %v out of a real model's range", r, p)
		}
	}
	whole, err := Compress(ctx, eng, sc, string(text[:20000]), CompressOptions{Rate: 1, PromptTokens: []int{200}, AnswerTokens: 16, Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if w := whole[0]; w.KeptTokens != 200 || math.Abs(w.PerplexityCompressed-w.PerplexityFull) > 1e-6*w.PerplexityFull || w.PerplexityTruncated != w.PerplexityFull {
		t.Errorf("rate 1: %+v: want every token kept and the same perplexity three ways", w)
	}
	if _, err := Compress(ctx, eng, sc, "too short.", CompressOptions{Rate: 0.5, PromptTokens: []int{200}, AnswerTokens: 16, Samples: 1}); err == nil {
		t.Errorf("a text too short was not refused")
	}
}
