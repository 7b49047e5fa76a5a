package engine

import (
	"context"
	"errors"
	"testing"
)

// TestGenerateAllAdmitsAsOne checks the admission of a batch of requests under MaxWaiting:
// an idle engine takes more requests than MaxWaiting at once, and while requests wait a
// batch that would pass the limit is refused whole, leaving the queue as it was.
func TestGenerateAllAdmitsAsOne(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{MaxWaiting: 2, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 1}})
	prompt := func(max int) Request {
		return Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: max, IgnoreEOS: true}}
	}
	chans, err := e.GenerateAll(context.Background(), []Request{prompt(2), prompt(2), prompt(2), prompt(2), prompt(2)})
	if err != nil {
		t.Fatalf("an idle engine refused 5 requests with MaxWaiting 2: %v", err)
	}
	for _, ch := range chans {
		collect(t, ch, 1)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running, err := e.Generate(ctx, prompt(1000))
	if err != nil {
		t.Fatal(err)
	}
	<-running // its first token: it runs, in the one running slot
	waiting, err := e.Generate(ctx, prompt(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.GenerateAll(ctx, []Request{prompt(1), prompt(1)}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("1 waiting + 2 with MaxWaiting 2: %v, want ErrQueueFull", err)
	}
	e.mu.Lock()
	inFlight := len(e.inFlight)
	e.mu.Unlock()
	if inFlight != 2 {
		t.Fatalf("after the refused batch %d requests are in flight, want the 2 before it", inFlight)
	}
	one, err := e.GenerateAll(ctx, []Request{prompt(1)})
	if err != nil {
		t.Fatalf("1 waiting + 1 with MaxWaiting 2: %v", err)
	}
	cancel()
	for _, ch := range []<-chan Output{running, waiting, one[0]} {
		for range ch {
		}
	}
	waitIdle(t, e)
}
