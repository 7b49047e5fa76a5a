package engine

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// TestLongPromptRefusedEarly submits a 4 MiB text prompt to an engine of 1024 tokens of
// context: it is refused as too long after encoding little more than the context, in a
// fraction of the time and memory its full encoding takes.
func TestLongPromptRefusedEarly(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{})
	text := strings.Repeat("Once upon a time, a little cat sat on the mat. ", (4<<20)/47)
	full := time.Now()
	tm.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true})
	fullTime := time.Since(full)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := e.Generate(context.Background(), Request{Prompt: text, Params: SamplingParams{MaxTokens: 4}})
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "more than 1024 tokens") {
		t.Fatalf("Generate: %v, want ErrTooLong saying more than 1024 tokens", err)
	}
	t.Logf("refused in %v (full encoding %v), allocating %d bytes", took, fullTime, after.TotalAlloc-before.TotalAlloc)
	if took > fullTime/4 {
		t.Errorf("refusing took %v, the full encoding %v: want under a quarter of it", took, fullTime)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(text)) {
		t.Errorf("refusing allocated %d bytes, more than 4x the %d bytes of the prompt", alloc, len(text))
	}
}
