package model

import (
	"math"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// TestTinyStoriesTiedHead: TinyStories-656K's Hugging Face folder keeps its tied embeddings
// only as lm_head.weight. Loaded from it (F32 weights), the model follows llama.cpp's greedy
// run of the same model's Q8_0 GGUF as far as the quantization allows. The GGUF, on our
// reference path, first reproduces that run (its 100 tokens, checked against llama.cpp's text);
// fed the same tokens, the folder's logits stay within 0.5 of the GGUF's at every step, and
// wherever the folder's own greedy pick differs from the run's token, that token's logit is
// within 0.5 of the pick's: a near-tie that Q8_0's rounding may decide either way.
func TestTinyStoriesTiedHead(t *testing.T) {
	const steps, bound = 100, 0.5
	open := func(rel string) *format.Model {
		fm, err := format.Open(testdata.Path(t, rel), format.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fm.Close() })
		return fm
	}
	hf := open("models/tinystories-656k")
	q8 := open("models/tinystories-656k-gguf/TinyStories-656K-Q8_0.gguf")
	if !hf.Config.TiedEmbeddings {
		t.Fatal("the folder's model is not tied")
	}
	tok, err := tokenizer.New(hf.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimRight(readFile(t, "models/tinystories-656k-gguf/ref_llamacpp_q8_0_greedy100.txt"), "\n")
	prompt := tok.Encode("Once upon a time", tokenizer.EncodeOptions{AddSpecial: true})
	run := append(prompt, greedy(t, refStepper(t, q8), prompt, steps)...)
	if got := tok.Decode(run, false); got != want {
		t.Fatalf("the GGUF's greedy run is not llama.cpp's:\n got %q\nwant %q", got, want)
	}

	hfStep, q8Step := refStepper(t, hf), refStepper(t, q8)
	var worst float64
	differ := 0
	for i, id := range run[:len(run)-1] {
		a, err := hfStep(id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := q8Step(id)
		if err != nil {
			t.Fatal(err)
		}
		for j := range a {
			worst = max(worst, math.Abs(float64(a[j]-b[j])))
		}
		if i < len(prompt)-1 {
			continue
		}
		next, pick := run[i+1], sample.Greedy(a)
		if pick != next {
			differ++
			if gap := a[pick] - a[next]; gap > bound {
				t.Errorf("position %d: the folder picks token %d, %.3f above llama.cpp's %d", i+1, pick, gap, next)
			}
		}
	}
	if worst > bound {
		t.Errorf("logits differ from the Q8_0 GGUF's by up to %.3f > %g", worst, bound)
	}
	t.Logf("logits within %.3f of the Q8_0 GGUF's; the folder's greedy pick differs from llama.cpp's run at %d of %d positions", worst, differ, steps)
}
