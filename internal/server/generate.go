package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/kvasir-llm/kvasir"
)

// item is one engine output of the prompt at index Prompt of a request.
type item struct {
	Prompt int
	Out    kvasir.Output
}

// submit hands the engine one request per prompt (all with ctx), admitted or refused as a
// whole, and merges their outputs into one channel, closed when every request has finished
// or ctx is done.
func (s *Server) submit(ctx context.Context, id string, reqs []kvasir.Request, promptParam string) (<-chan item, *APIError) {
	for i := range reqs {
		reqs[i].ID = id + "-" + strconv.Itoa(i)
	}
	s.attachTransfer(ctx, reqs)
	chans, err := s.eng.GenerateAll(ctx, reqs)
	if err != nil {
		return nil, engineError(err, promptParam)
	}
	merged := make(chan item)
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range ch {
				select {
				case merged <- item{Prompt: i, Out: o}:
				case <-ctx.Done():
					// The engine's pump stops delivering once ctx is done, so ch
					// need not be drained.
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(merged)
	}()
	return merged, nil
}

// choiceState accumulates one choice of a non-streaming response.
type choiceState struct {
	text     strings.Builder
	tokens   []int32
	logprobs []kvasir.Logprob
	finish   string
	stop     any
}

// collected is a finished non-streaming generation.
type collected struct {
	choices []choiceState
	// promptLogprobs are each prompt's prompt logprobs, when the request asked for them,
	// and promptTokens each prompt's tokens as the engine tokenized it (on the same output).
	promptLogprobs [][]kvasir.Logprob
	promptTokens   [][]int32
	usage          usage
}

// collect reads a generation to its end: n choices per prompt, choice index
// prompt*n + output index.
func collect(ch <-chan item, prompts, n int) (*collected, *APIError) {
	c := &collected{choices: make([]choiceState, prompts*n), promptLogprobs: make([][]kvasir.Logprob, prompts),
		promptTokens: make([][]int32, prompts)}
	last := make([]kvasir.Usage, prompts)
	var failed error
	for it := range ch {
		o := it.Out
		if o.Err != nil && failed == nil {
			failed = o.Err
		}
		if o.PromptTokenIDs != nil {
			c.promptLogprobs[it.Prompt], c.promptTokens[it.Prompt] = o.PromptLogprobs, o.PromptTokenIDs
		}
		cs := &c.choices[it.Prompt*n+o.Index]
		cs.text.WriteString(o.Text)
		cs.tokens = append(cs.tokens, o.TokenIDs...)
		cs.logprobs = append(cs.logprobs, o.Logprobs...)
		if o.FinishReason != "" {
			cs.finish = o.FinishReason
			cs.stop = o.StopReason
		}
		last[it.Prompt] = o.Usage
	}
	if failed != nil {
		return nil, internalError(failed)
	}
	for _, u := range last {
		c.usage.add(u)
	}
	return c, nil
}

// usageTracker sums the running usage of a streamed generation's requests.
type usageTracker struct {
	last []kvasir.Usage
	// compression is the request's prompt compression (nil: none).
	compression *compressionUsage
}

func (u *usageTracker) update(it item) {
	u.last[it.Prompt] = it.Out.Usage
}

func (u *usageTracker) total() *usage {
	var t usage
	for _, k := range u.last {
		t.add(k)
	}
	t.PromptCompression = u.compression
	return &t
}

// requestContext is the context of a generation: the client's request context, which ends
// when the client goes away, so that its request is aborted at once.
func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithCancel(r.Context())
}
