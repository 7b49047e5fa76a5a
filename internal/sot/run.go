package sot

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/kvasir-llm/kvasir"
)

// Engine is what Skeleton-of-Thought needs of a kvasir.Engine.
type Engine interface {
	GenerateAll(ctx context.Context, reqs []kvasir.Request) ([]<-chan kvasir.Output, error)
}

// Request is one Skeleton-of-Thought answer to make.
type Request struct {
	// ID names the engine requests: ID-skeleton, ID-point-N, ID-plain.
	ID string
	// History is the conversation before the question; Question the last user message.
	History  []Message
	Question string
	// Params are the sampling parameters of the skeleton and the points (N 1). MaxTokens
	// bounds the points' tokens together (0: DefaultPointTokens each); the skeleton has
	// SkeletonMaxTokens of its own.
	Params kvasir.SamplingParams
	// Priority and CacheSalt are those of every engine request.
	Priority  int
	CacheSalt string
	// Render tokenizes messages as a prompt whose reply begins with prefill (the model
	// continues it).
	Render func(msgs []Message, prefill string) ([]int32, error)
	// Constrain, when set, makes the processor holding the skeleton to a regular
	// expression (SkeletonRegex).
	Constrain func(regex string) (kvasir.Processor, error)
	// Plain is the request answering the question directly: the fallback.
	Plain kvasir.Request
}

// Result is an answer made.
type Result struct {
	// Text is the answer: the expanded points in order, one per line (or the plain answer).
	Text string
	// Skeleton is the skeleton's text; Points its points (nil after a fallback).
	Skeleton string
	Points   []string
	// SkeletonTokens is how many tokens the skeleton took (of Usage.CompletionTokens).
	SkeletonTokens int
	// Fallback is set when the skeleton did not parse and the plain answer was made.
	Fallback bool
	// FinishReason is length when a point (or the plain answer) ran out of tokens, else
	// stop.
	FinishReason string
	// Usage sums every engine request's: the skeleton, the points (or the plain answer).
	Usage kvasir.Usage
}

// Run answers r: the skeleton, then its points expanded in parallel, emitting the answer's
// text in order as it is known (emit returning false stops the run: the client is gone).
// Every engine request ends when Run returns, and no goroutine of it outlives it.
func Run(ctx context.Context, eng Engine, r Request, emit func(text string) bool) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var res Result
	sk, err := r.skeleton()
	if err != nil {
		return res, err
	}
	// The skeleton is read to its end, or until MaxPoints points are complete (the
	// regular expression leaves their count open): then its request is ended.
	skCtx, skDone := context.WithCancel(ctx)
	defer skDone()
	outs, err := generate(skCtx, eng, []kvasir.Request{sk})
	if err != nil {
		return res, err
	}
	var text strings.Builder
	enough := false
	err = drain(skCtx, outs[0], func(o kvasir.Output) bool {
		text.WriteString(o.Text)
		res.Usage = o.Usage // the request's running total
		enough = strings.Count(text.String(), "\n") >= MaxPoints
		return !enough
	})
	skDone()
	if err != nil && !enough {
		return res, err
	}
	res.Skeleton = SkeletonPrefill + text.String()
	res.SkeletonTokens = res.Usage.CompletionTokens
	points, err := ParseSkeleton(res.Skeleton)
	if err != nil {
		res.Fallback = true
		return res, r.plain(ctx, eng, &res, emit)
	}
	res.Points = points
	return res, r.expand(ctx, eng, &res, emit)
}

// skeleton is the engine request of the skeleton.
func (r *Request) skeleton() (kvasir.Request, error) {
	prompt, err := r.Render(SkeletonMessages(r.History, r.Question), SkeletonPrefill)
	if err != nil {
		return kvasir.Request{}, err
	}
	p := r.Params
	// The skeleton ends where its list does: not at the answer's stops or length rules.
	p.N, p.MaxTokens, p.MinTokens, p.IgnoreEOS, p.Stop, p.StopTokenIDs = 1, SkeletonMaxTokens, 0, false, nil, nil
	req := kvasir.Request{ID: r.ID + "-skeleton", PromptTokens: prompt, Params: p, Priority: r.Priority, CacheSalt: r.CacheSalt}
	if r.Constrain != nil {
		proc, err := r.Constrain(SkeletonRegex())
		if err != nil {
			return kvasir.Request{}, fmt.Errorf("constraining the skeleton: %w", err)
		}
		req.Processors = []kvasir.Processor{proc}
	}
	return req, nil
}

// plain makes the plain answer, emitting it as it comes.
func (r *Request) plain(ctx context.Context, eng Engine, res *Result, emit func(string) bool) error {
	req := r.Plain
	req.ID = r.ID + "-plain"
	outs, err := generate(ctx, eng, []kvasir.Request{req})
	if err != nil {
		return err
	}
	var text strings.Builder
	before := res.Usage
	err = drain(ctx, outs[0], func(o kvasir.Output) bool {
		text.WriteString(o.Text)
		res.Usage = addUsage(before, o.Usage)
		if o.FinishReason != "" {
			res.FinishReason = o.FinishReason
		}
		return o.Text == "" || emit(o.Text)
	})
	res.Text = text.String()
	return err
}

// pointTokens splits the points' budget: max tokens in all (0: DefaultPointTokens each),
// the remainder to the first points, at least one each.
func pointTokens(total, points int) []int {
	out := make([]int, points)
	for i := range out {
		switch {
		case total <= 0:
			out[i] = DefaultPointTokens
		default:
			out[i] = max(1, total/points)
			if i < total%points {
				out[i]++
			}
		}
	}
	return out
}

// expand runs one sequence per point: the first alone until its prompt is computed (its
// first token), so that its blocks are in the prefix cache, then the others, which share
// them. The answer is emitted in point order: point i's text as it comes, the later
// points' held until the points before them are done.
func (r *Request) expand(ctx context.Context, eng Engine, res *Result, emit func(string) bool) error {
	n := len(res.Points)
	budget := pointTokens(r.Params.MaxTokens, n)
	reqs := make([]kvasir.Request, n)
	for i := range reqs {
		prompt, err := r.Render(PointMessages(r.History, r.Question, res.Points, i+1), PointPrefill(res.Points, i+1))
		if err != nil {
			return err
		}
		p := r.Params
		p.N, p.MaxTokens = 1, budget[i]
		reqs[i] = kvasir.Request{ID: r.ID + "-point-" + strconv.Itoa(i+1), PromptTokens: prompt, Params: p, Priority: r.Priority, CacheSalt: r.CacheSalt}
	}
	type event struct {
		point int
		out   kvasir.Output
	}
	events := make(chan event)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // first: the forwarders stop, and the engine ends the requests
	forward := func(point int, ch <-chan kvasir.Output) {
		defer wg.Done()
		for {
			select {
			case o, ok := <-ch:
				if !ok {
					return
				}
				select {
				case events <- event{point, o}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
	first, err := generate(ctx, eng, reqs[:1])
	if err != nil {
		return err
	}
	wg.Add(1)
	go forward(0, first[0])

	held := make([]strings.Builder, n) // each point's text not yet emitted
	begun, done := make([]bool, n), make([]bool, n)
	usage := make([]kvasir.Usage, n)
	finish := make([]string, n)
	var text strings.Builder
	write := func(s string) bool {
		text.WriteString(s)
		return emit(s)
	}
	next, open, started := 0, 1, false // the point being emitted; requests open; the rest started
	for open > 0 {
		var ev event
		select {
		case ev = <-events:
		case <-ctx.Done():
			return ctx.Err()
		}
		o := ev.out
		if o.Err != nil {
			return o.Err
		}
		usage[ev.point] = o.Usage
		held[ev.point].WriteString(o.Text)
		if o.FinishReason != "" {
			done[ev.point], finish[ev.point] = true, o.FinishReason
			open--
			if o.FinishReason == kvasir.FinishAbort {
				return fmt.Errorf("point %d: aborted", ev.point+1)
			}
		}
		if !started && (len(o.TokenIDs) > 0 || done[0]) {
			// The first point's prompt is computed: start the others.
			started = true
			rest, err := generate(ctx, eng, reqs[1:])
			if err != nil {
				return err
			}
			for i, ch := range rest {
				wg.Add(1)
				go forward(i+1, ch)
			}
			open += len(rest)
		}
		for next < n {
			if !begun[next] {
				// A point begins with its number and skeleton text, which its prompt
				// holds and its sequence continues.
				sep := ""
				if next > 0 {
					sep = "\n"
				}
				begun[next] = true
				if !write(sep + PointPrefill(res.Points, next+1)) {
					return context.Canceled
				}
			}
			if chunk := held[next].String(); chunk != "" {
				held[next].Reset()
				if !write(chunk) {
					return context.Canceled
				}
			}
			if !done[next] {
				break
			}
			next++
		}
	}
	res.Text = text.String()
	res.FinishReason = kvasir.FinishStop
	for i, u := range usage {
		res.Usage = addUsage(res.Usage, u)
		if finish[i] == kvasir.FinishLength {
			res.FinishReason = kvasir.FinishLength
		}
	}
	return nil
}

// generate submits reqs, mapping a refusal to an error that says which.
func generate(ctx context.Context, eng Engine, reqs []kvasir.Request) ([]<-chan kvasir.Output, error) {
	chans, err := eng.GenerateAll(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("skeleton of thought: %s: %w", reqs[0].ID, err)
	}
	return chans, nil
}

// drain reads ch to its end, calling f on every output (f returning false: stop),
// returning the engine's error or ctx's.
func drain(ctx context.Context, ch <-chan kvasir.Output, f func(kvasir.Output) bool) error {
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				return nil
			}
			if o.Err != nil {
				return o.Err
			}
			if !f(o) {
				return context.Canceled
			}
			if o.FinishReason == kvasir.FinishAbort {
				return errors.New("skeleton of thought: the engine aborted the request")
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// addUsage is a + b.
func addUsage(a, b kvasir.Usage) kvasir.Usage {
	return kvasir.Usage{PromptTokens: a.PromptTokens + b.PromptTokens, CompletionTokens: a.CompletionTokens + b.CompletionTokens,
		CachedPromptTokens: a.CachedPromptTokens + b.CachedPromptTokens}
}
