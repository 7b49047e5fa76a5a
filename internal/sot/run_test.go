package sot

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// openEngine opens an engine on a small synthesized model (random Q8_0 weights, whose
// greedy tokens do not change with the batch) with a long enough context for the
// templates.
func openEngine(t *testing.T) *kvasir.Engine {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 64, 4, 2, 16, 16, 128, 2048
	shape.Config = c
	fm, err := synth.Model(shape, quant.Q8_0, 7)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := kvasir.OpenModel(fm, kvasir.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	return eng
}

// request is a Skeleton-of-Thought request on eng, its messages rendered as "role: text"
// lines, greedy, with the skeleton constrained when constrain is set.
func request(t *testing.T, eng *kvasir.Engine, constrain bool, maxTokens int) Request {
	t.Helper()
	render := func(msgs []Message, prefill string) ([]int32, error) {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Role + ": " + m.Content + "\n")
		}
		b.WriteString("assistant: " + prefill)
		return eng.TokenizePrompt(b.String())
	}
	params := kvasir.SamplingParams{Temperature: 0, MaxTokens: maxTokens}
	history := []Message{{Role: "system", Content: "Be helpful."}}
	question := "How do I make tea?"
	plain, err := render(append(history, Message{Role: "user", Content: question}), "")
	if err != nil {
		t.Fatal(err)
	}
	r := Request{ID: "sot-test", History: history, Question: question, Params: params, Render: render,
		Plain: kvasir.Request{PromptTokens: plain, Params: kvasir.SamplingParams{Temperature: 0, MaxTokens: 24}}}
	if constrain {
		r.Constrain = func(re string) (kvasir.Processor, error) { return eng.Constrain(kvasir.StructuredOutput{Regex: re}) }
	}
	return r
}

// alone runs one request by itself and returns its text and usage.
func alone(t *testing.T, eng *kvasir.Engine, req kvasir.Request) (string, kvasir.Usage) {
	t.Helper()
	ch, err := eng.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var u kvasir.Usage
	for o := range ch {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		b.WriteString(o.Text)
		u = o.Usage
	}
	return b.String(), u
}

// waitIdle waits until the engine runs nothing and holds no KV block.
func waitIdle(t *testing.T, eng *kvasir.Engine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := eng.Stats()
		if s.Running == 0 && s.Waiting == 0 && s.UsedBlocks == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %d running, %d waiting, %d blocks used", s.Running, s.Waiting, s.UsedBlocks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunAssembles: the answer is every point's prefill and expansion, in order, each the
// text that point's request makes alone (greedy); the stream is the answer; the usage is
// the sum of the skeleton's and the points' requests; the points after the first take
// their shared prefix from the cache.
func TestRunAssembles(t *testing.T) {
	eng := openEngine(t)
	r := request(t, eng, true, 40)
	var streamed strings.Builder
	res, err := Run(context.Background(), eng, r, func(s string) bool { streamed.WriteString(s); return true })
	if err != nil {
		t.Fatal(err)
	}
	if res.Fallback || len(res.Points) < MinPoints {
		t.Fatalf("constrained skeleton %q fell back (%d points)", res.Skeleton, len(res.Points))
	}
	if streamed.String() != res.Text {
		t.Errorf("streamed %q, answer %q", streamed.String(), res.Text)
	}
	// The skeleton alone.
	sk, err := r.skeleton()
	if err != nil {
		t.Fatal(err)
	}
	// Alone it runs to its end; Run stops it once MaxPoints points are complete.
	skText, skUsage := alone(t, eng, sk)
	if !strings.HasPrefix(SkeletonPrefill+skText, res.Skeleton) || res.SkeletonTokens > skUsage.CompletionTokens {
		t.Errorf("skeleton %q (%d tokens), alone %q (%d)", res.Skeleton, res.SkeletonTokens, SkeletonPrefill+skText, skUsage.CompletionTokens)
	}
	if res.SkeletonTokens < skUsage.CompletionTokens && strings.Count(res.Skeleton, "\n") < MaxPoints {
		t.Errorf("skeleton stopped early at %d points: %q", len(res.Points), res.Skeleton)
	}
	want := kvasir.Usage{PromptTokens: skUsage.PromptTokens, CompletionTokens: res.SkeletonTokens}
	budget := pointTokens(r.Params.MaxTokens, len(res.Points))
	var parts []string
	total := 0
	for i := range res.Points {
		prompt, err := r.Render(PointMessages(r.History, r.Question, res.Points, i+1), PointPrefill(res.Points, i+1))
		if err != nil {
			t.Fatal(err)
		}
		text, u := alone(t, eng, kvasir.Request{PromptTokens: prompt, Params: kvasir.SamplingParams{Temperature: 0, MaxTokens: budget[i]}})
		parts = append(parts, PointPrefill(res.Points, i+1)+text)
		want.PromptTokens += u.PromptTokens
		want.CompletionTokens += u.CompletionTokens
		total += budget[i]
	}
	if total != r.Params.MaxTokens {
		t.Errorf("point budgets sum to %d, want max_tokens %d", total, r.Params.MaxTokens)
	}
	if wantText := strings.Join(parts, "\n"); res.Text != wantText {
		t.Errorf("answer\n%q\nwant (each point alone)\n%q", res.Text, wantText)
	}
	if res.Usage.PromptTokens != want.PromptTokens || res.Usage.CompletionTokens != want.CompletionTokens {
		t.Errorf("usage %+v, want the requests' sum %+v", res.Usage, want)
	}
	if res.Usage.CachedPromptTokens < (len(res.Points)-1)*16 {
		t.Errorf("%d cached prompt tokens over %d points: the expansions did not share their prefix", res.Usage.CachedPromptTokens, len(res.Points))
	}
	waitIdle(t, eng)
}

// TestRunFallback: an unconstrained skeleton of a random model does not parse; the answer
// is the plain request's, and the usage counts both.
func TestRunFallback(t *testing.T) {
	eng := openEngine(t)
	r := request(t, eng, false, 40)
	var streamed strings.Builder
	res, err := Run(context.Background(), eng, r, func(s string) bool { streamed.WriteString(s); return true })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fallback {
		t.Fatalf("skeleton %q parsed as %q: want a fallback", res.Skeleton, res.Points)
	}
	text, u := alone(t, eng, r.Plain)
	if res.Text != text || streamed.String() != text {
		t.Errorf("fallback answer %q (streamed %q), plain %q", res.Text, streamed.String(), text)
	}
	if res.Usage.CompletionTokens <= u.CompletionTokens || res.Usage.PromptTokens <= u.PromptTokens {
		t.Errorf("usage %+v does not count the skeleton beside the plain answer's %+v", res.Usage, u)
	}
	waitIdle(t, eng)
}

// TestRunCancel: a client that goes away mid-answer (emit false, or the context ended)
// ends every sequence: no block held, no goroutine left.
func TestRunCancel(t *testing.T) {
	eng := openEngine(t)
	alone(t, eng, request(t, eng, false, 1).Plain) // the engine's goroutines start
	baseline := runtime.NumGoroutine()
	for _, how := range []string{"emit", "context"} {
		r := request(t, eng, true, 400)
		ctx, cancel := context.WithCancel(context.Background())
		chunks := 0
		_, err := Run(ctx, eng, r, func(string) bool {
			chunks++
			if chunks == 3 {
				if how == "context" {
					cancel()
					return true
				}
				return false
			}
			return true
		})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Run returned %v, want context.Canceled", how, err)
		}
		waitIdle(t, eng)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
