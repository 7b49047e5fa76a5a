package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// openGenerator starts the engine of run and chat on the model the flags name, with one
// sequence at a time unless --max-num-seqs says otherwise (a KV cache sized for one
// sequence of the context length), and tune (when set) adjusting the options to the
// model. It logs the load to standard error, and the sampling defaults when the model's
// generation_config.json set them.
func openGenerator(ef *engineFlags, tune func(*kvasir.Options, *format.Model)) (*kvasir.Engine, error) {
	start := time.Now()
	e, err := ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
		if opt.MaxNumSeqs == 0 {
			opt.MaxNumSeqs = 1
		}
		if tune != nil {
			tune(opt, fm)
		}
	})
	if err != nil {
		return nil, err
	}
	l := e.Loaded()
	fm := l.File()
	if l.Tokenizer() == nil {
		e.Close()
		return nil, fmt.Errorf("%s has no tokenizer; name one with -z", fm.Name())
	}
	c := fm.Config
	fmt.Fprintf(os.Stderr, "loaded %s (%s, %d layers, dim %d, %.1f MB of weights) in %v on %s\n",
		fm.Name(), c.Arch, c.Layers, c.Dim, float64(fm.Bytes())/1e6, time.Since(start).Round(time.Millisecond), describe(l))
	if d := e.SamplingDefaults(); d != kvasir.NeutralSampling() {
		fmt.Fprintf(os.Stderr, "sampling defaults from generation_config.json: %s\n", d)
	}
	if line := speculationLine(e); line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
	return e, nil
}

// reply is what one request generated.
type reply struct {
	// ids are the generated tokens, an end-of-generation token that stopped them left out.
	ids []int32
	// prefill runs from the submission to the first token; decode from there to the end.
	prefill, decode time.Duration
	// cached counts the prompt tokens the prefix cache held.
	cached int
}

// generate runs one request of prompt with params through the engine and streams the
// generated text through detok to w as it comes; detok may already hold the prompt (so
// that the text joins up with it). The token that ends generation is not printed. When ctx
// ends, the request is aborted and what came so far is returned.
func generate(ctx context.Context, e *kvasir.Engine, prompt []int32, params kvasir.SamplingParams, detok *tokenizer.Detokenizer, w io.Writer) (reply, error) {
	var r reply
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	ch, err := e.Generate(ctx, kvasir.Request{PromptTokens: prompt, Params: params})
	if err != nil {
		return r, err
	}
	var first time.Time
	var werr, gerr error
	for o := range ch {
		ids := o.TokenIDs
		if o.FinishReason == kvasir.FinishStop && o.StopReason == nil && len(ids) > 0 {
			ids = ids[:len(ids)-1] // the end-of-generation token
		}
		if len(o.TokenIDs) > 0 && first.IsZero() {
			first = time.Now()
		}
		for _, id := range ids {
			if werr == nil {
				if _, werr = io.WriteString(w, detok.Add(int(id))); werr != nil {
					cancel() // nobody reads on: stop generating
				}
			}
		}
		r.ids = append(r.ids, ids...)
		r.cached = o.Usage.CachedPromptTokens
		if o.Err != nil {
			gerr = o.Err
		}
	}
	if first.IsZero() {
		first = time.Now()
	}
	r.prefill, r.decode = first.Sub(start), time.Since(first)
	if werr == nil {
		_, werr = io.WriteString(w, detok.Flush())
	}
	if gerr != nil {
		return r, fmt.Errorf("generation: %w", gerr)
	}
	return r, werr
}

// perSecond returns n per d, 0 for no time.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// clockSeed returns seed, or a seed from the clock when seed is negative.
func clockSeed(seed int64) uint64 {
	if seed < 0 {
		return uint64(time.Now().UnixNano())
	}
	return uint64(seed)
}
