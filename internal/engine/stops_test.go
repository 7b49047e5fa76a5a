package engine

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// TestStopSetSharedByChoices checks that the stop strings of a request are compiled once
// and that all of its choices walk that one set, instead of each holding a copy of the list.
func TestStopSetSharedByChoices(t *testing.T) {
	tm := newTinyModel(t)
	stops := make([]string, 1000)
	for i := range stops {
		stops[i] = fmt.Sprintf("never-%d", i)
	}
	const n = 8
	checked := make(chan error, 1)
	e := tm.engineWithHook(t, Config{}, func(e *Engine) {
		for _, r := range e.active {
			if len(r.seqs) < n {
				continue
			}
			var err error
			if r.stops == nil {
				err = fmt.Errorf("request has no stop set")
			}
			for _, seq := range r.seqs {
				if err == nil && seq.stop.Set() != r.stops {
					err = fmt.Errorf("choice %d matches against a stop set of its own", seq.index)
				}
			}
			select {
			case checked <- err:
			default:
			}
		}
	})
	seed := uint64(1)
	ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time",
		Params: SamplingParams{N: n, MaxTokens: 8, IgnoreEOS: true, Temperature: 1, Seed: &seed, Stop: stops}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, ch, n)
	select {
	case err := <-checked:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("no step saw the request's choices forked")
	}
}

// TestManyStopStringsCostNothing generates n=16 x 64 tokens with 100 k stop strings and
// without: matching is linear in the new text whatever the number of stop strings, so the
// generation (first token to last, by the engine's clock: the stop set is compiled before)
// takes hardly longer, and the loop every request shares is not held up. (Matching every
// stop string at every token, as before, made it a hundred times slower.)
func TestManyStopStringsCostNothing(t *testing.T) {
	tm := newTinyModel(t)
	done := make(chan RequestStats, 1)
	e := tm.engine(t, Config{OnRequestDone: func(s RequestStats) { done <- s }})
	stops := make([]string, 100_000)
	for i := range stops {
		stops[i] = fmt.Sprintf("zq%dzq", i)
	}
	generation := func(stops []string) time.Duration {
		least := time.Duration(math.MaxInt64)
		for range 3 {
			ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time",
				Params: SamplingParams{N: 16, MaxTokens: 64, IgnoreEOS: true, Stop: stops}})
			if err != nil {
				t.Fatal(err)
			}
			collect(t, ch, 16)
			s := <-done
			least = min(least, s.E2E-s.TTFT)
		}
		return least
	}
	plain, many := generation(nil), generation(stops)
	t.Logf("n=16 x 64 tokens generated in %v, with 100 k stop strings in %v", plain, many)
	if many > 2*plain+50*time.Millisecond {
		t.Errorf("generating with 100 k stop strings took %v, %v without: want at most twice", many, plain)
	}
}
