package model

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

const storiesDir = "models/stories260K/"

// stepper is one forward pass at a time, fast path or reference.
type stepper func(token int) ([]float32, error)

// openStories opens a stories260K file (the .bin with tok512.bin) and returns the model and
// its tokenizer.
func openStories(t *testing.T, name string) (*format.Model, *tokenizer.Tokenizer) {
	t.Helper()
	path := testdata.Path(t, storiesDir+name)
	opt := format.Options{}
	if strings.HasSuffix(name, ".bin") {
		opt.Tokenizer = testdata.Path(t, storiesDir+"tok512.bin")
	}
	fm, err := format.Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	tok, err := tokenizer.New(fm.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	return fm, tok
}

// fastStepper runs the fast path one token at a time through a Session.
func fastStepper(t *testing.T, fm *format.Model) stepper {
	t.Helper()
	m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	s, err := m.NewSession(512)
	if err != nil {
		t.Fatal(err)
	}
	return func(tok int) ([]float32, error) { return s.Step(int32(tok)) }
}

func refStepper(t *testing.T, fm *format.Model) stepper {
	t.Helper()
	r, err := NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	return r.Forward
}

// greedy feeds prompt, then generates n tokens greedily, returning the generated ids.
func greedy(t *testing.T, step stepper, prompt []int, n int) []int {
	t.Helper()
	var logits []float32
	var err error
	for _, tok := range prompt {
		if logits, err = step(tok); err != nil {
			t.Fatal(err)
		}
	}
	var out []int
	for len(out) < n {
		next := sample.Greedy(logits)
		out = append(out, next)
		if len(out) == n {
			break
		}
		if logits, err = step(next); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(testdata.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStoriesGreedyFromBOS: 200 greedy steps from BOS reproduce llama2.c's run.c output,
// byte for byte, from the checkpoint and the F32 and F16 GGUF files, on the fast path and
// (for the checkpoint) on the reference path.
//
// The Q8_0 file's quantized weights make a different model: its reference path (weights
// dequantized exactly, fp32 activations) leaves run.c's path at a near-tie after some 70
// tokens. For it the test requires the fast path (which also quantizes activations) to
// follow its own reference path for at least 60 tokens and to part from it only at a
// near-tie (reference logits within 0.05), to match run.c for at least 60 tokens, and to
// part from run.c only where run.c's own logits of the two tokens are within 0.5.
func TestStoriesGreedyFromBOS(t *testing.T) {
	want := readFile(t, storiesDir+"ref_runc_greedy200.txt")
	wantLogits := readLogits(t)
	cases := []struct {
		file       string
		ref, exact bool
	}{
		{"stories260K.bin", false, true}, {"stories260K.bin", true, true},
		{"stories260K.gguf", false, true}, {"stories260K-F16.gguf", false, true},
		{"stories260K-Q8_0.gguf", false, false},
	}
	for _, c := range cases {
		name := c.file
		if c.ref {
			name += "/reference"
		}
		t.Run(name, func(t *testing.T) {
			fm, tok := openStories(t, c.file)
			step := fastStepper
			if c.ref {
				step = refStepper
			}
			ids := greedy(t, step(t, fm), []int{fm.Vocab.BOS}, 200)
			got := tok.Decode(ids, true)
			if c.exact {
				if got != want {
					t.Errorf("greedy text differs from run.c's\n got: %q\nwant: %q", got, want)
				}
				return
			}
			// The fast path quantizes activations to 8 bits for Q8_0 weights, so it may part
			// from the reference path only at a near-tie of the reference's own logits.
			refIDs := greedy(t, refStepper(t, fm), []int{fm.Vocab.BOS}, 200)
			for i := range ids {
				if ids[i] == refIDs[i] {
					continue
				}
				ref := refStepper(t, fm)
				var l []float32
				for _, tok := range append([]int{fm.Vocab.BOS}, refIDs[:i]...) {
					var err error
					if l, err = ref(tok); err != nil {
						t.Fatal(err)
					}
				}
				gap := l[refIDs[i]] - l[ids[i]]
				t.Logf("fast path leaves the reference path at step %d (%d vs %d) where the reference's logits differ by %.4f", i, ids[i], refIDs[i], gap)
				if i < 60 || gap > 0.05 {
					t.Fatalf("fast path leaves the reference path at step %d: %d vs %d, reference logit gap %.4f", i, ids[i], refIDs[i], gap)
				}
				ids = ids[:i] // compare with run.c only as far as both paths agree
				break
			}
			same := 0
			for same < len(ids) && same+1 < len(wantLogits) && ids[same] == wantLogits[same+1].Token {
				same++
			}
			if same == len(ids) || same+1 >= len(wantLogits) {
				t.Logf("all %d tokens match run.c", same)
				return
			}
			l := wantLogits[same].Logits
			ours, theirs := ids[same], wantLogits[same+1].Token
			gap := l[theirs] - l[ours]
			t.Logf("%d tokens match run.c; at step %d run.c's logits of its token %d and ours %d differ by %.4f", same, same, theirs, ours, gap)
			if same < 60 || gap > 0.5 {
				t.Errorf("Q8_0 leaves run.c after %d tokens with a logit gap of %.4f", same, gap)
			}
		})
	}
}

// readLogits reads ref_greedy_logits.jsonl: run.c's input token and logits at each step.
func readLogits(t *testing.T) []logitStep {
	t.Helper()
	f, err := os.Open(testdata.Path(t, storiesDir+"ref_greedy_logits.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []logitStep
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s logitStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, s)
	}
	if err := sc.Err(); err != nil || len(steps) != 200 {
		t.Fatalf("read %d steps: %v", len(steps), err)
	}
	return steps
}

// logitStep is one line of ref_greedy_logits.jsonl.
type logitStep struct {
	Pos    int       `json:"pos"`
	Token  int       `json:"token"`
	Logits []float32 `json:"logits"`
}

// TestStoriesLogits: with run.c's tokens fed in, the fp32 logits at every step are within
// 1e-4 of run.c's, on the fast path and the reference path, from the checkpoint and the F32
// GGUF.
func TestStoriesLogits(t *testing.T) {
	steps := readLogits(t)
	for _, file := range []string{"stories260K.bin", "stories260K.gguf"} {
		for _, ref := range []bool{false, true} {
			name := file
			if ref {
				name += "/reference"
			}
			t.Run(name, func(t *testing.T) {
				fm, _ := openStories(t, file)
				step := fastStepper(t, fm)
				if ref {
					step = refStepper(t, fm)
				}
				var worst float64
				for i, s := range steps {
					if s.Pos != i {
						t.Fatalf("line %d has pos %d", i, s.Pos)
					}
					got, err := step(s.Token)
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(s.Logits) {
						t.Fatalf("step %d: %d logits, want %d", i, len(got), len(s.Logits))
					}
					for j, v := range got {
						worst = max(worst, math.Abs(float64(v-s.Logits[j])))
					}
					if worst > 1e-4 {
						t.Fatalf("step %d: logits differ from run.c's by %g > 1e-4", i, worst)
					}
				}
				t.Logf("max abs logit difference over 200 steps: %.3g", worst)
			})
		}
	}
}

// TestStoriesPrompt: "Once upon a time" (after BOS) continues as llama.cpp continues it,
// for the F32, F16 and Q8_0 GGUF files.
func TestStoriesPrompt(t *testing.T) {
	want := readFile(t, storiesDir+"ref_llamacpp_f32_greedy100.txt")
	for _, file := range []string{"stories260K.gguf", "stories260K-F16.gguf", "stories260K-Q8_0.gguf"} {
		t.Run(file, func(t *testing.T) {
			fm, tok := openStories(t, file)
			prompt := tok.Encode("Once upon a time", tokenizer.EncodeOptions{AddSpecial: true})
			if len(prompt) == 0 || prompt[0] != fm.Vocab.BOS {
				t.Fatalf("prompt %v does not start with BOS", prompt)
			}
			ids := greedy(t, fastStepper(t, fm), prompt, 100)
			got := tok.Decode(append(prompt, ids...), false)
			if strings.TrimRight(got, "\n") != strings.TrimRight(want, "\n") {
				t.Errorf("continuation differs from llama.cpp's\n got: %q\nwant: %q", got, want)
			}
		})
	}
}
