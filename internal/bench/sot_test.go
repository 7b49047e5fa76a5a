package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/sot"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestSoTRows runs bench sot on the trained draft: both answers have the asked length, the
// skeleton parses (constrained), and the ratio is that of the times.
func TestSoTRows(t *testing.T) {
	eng, err := kvasir.Open(testdata.Path(t, "models/trained/draft"), kvasir.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	render := func(msgs []sot.Message, prefill string) ([]int32, error) {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Role + ": " + m.Content + "\n")
		}
		return eng.TokenizePrompt(b.String() + "assistant: " + prefill)
	}
	rows, err := SoT(context.Background(), eng, render, []string{"How do ships float?"}, SoTOptions{MaxTokens: 40, Constrain: true, Repeats: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.Fallback || r.Points < sot.MinPoints || r.SkeletonTokens < 2 {
		t.Errorf("row %+v: want a parsed skeleton", r)
	}
	if r.AnswerTokens != 40 || r.PlainTokens != 40 {
		t.Errorf("row %+v: want 40 answer tokens both ways", r)
	}
	if math.Abs(r.Speedup-r.PlainSeconds/r.SoTSeconds) > 1e-9 || r.SoTSeconds <= 0 {
		t.Errorf("row %+v: speedup is not the ratio of the times", r)
	}
}
