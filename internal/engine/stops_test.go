package engine

import (
	"context"
	"fmt"
	"testing"
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
