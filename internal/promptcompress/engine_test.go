package promptcompress

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// openDraft opens the trained draft model of the shared test data (a real 6.6M-parameter
// Llama with a byte-level BPE vocabulary).
func openDraft(t *testing.T) *kvasir.Engine {
	t.Helper()
	eng, err := kvasir.Open(testdata.Path(t, "models/trained/draft"), kvasir.Options{Threads: 2})
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

// TestEngineScorerWindows checks the engine's surprisals of real text: one per token, a
// mean near the model's known cross-entropy (an off-by-one would score each token as
// the one after it, far worse), and windows: a window's tokens score as they do alone
// after the BOS.
func TestEngineScorerWindows(t *testing.T) {
	eng := openDraft(t)
	text, err := os.ReadFile(testdata.Path(t, "corpus/tinystories_excerpt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := eng.Tokenize(string(text[:2400]), false)
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:300]
	ctx := context.Background()
	whole, err := EngineScorer{Engine: eng}.Surprisal(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) != len(ids) {
		t.Fatalf("%d surprisals for %d tokens", len(whole), len(ids))
	}
	mean := 0.0
	for _, v := range whole {
		mean += v
	}
	mean /= float64(len(whole))
	// The draft's validation perplexity is 41.5 (3.7 nats); TinyStories is in its
	// training data, so easier; a shifted score would be near the unigram's ~6 or worse.
	if mean < 1 || mean > 4.5 {
		t.Errorf("mean surprisal %.2f nats, want 1..4.5", mean)
	}
	windowed, err := EngineScorer{Engine: eng, Window: 128}.Surprisal(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	second, err := EngineScorer{Engine: eng}.Surprisal(ctx, ids[128:256])
	if err != nil {
		t.Fatal(err)
	}
	for i := range 128 {
		if math.Abs(windowed[i]-whole[i]) > 1e-3 || math.Abs(windowed[128+i]-second[i]) > 1e-3 {
			t.Fatalf("token %d: windowed %.4f, whole %.4f / second window alone %.4f", i, windowed[i], whole[i], second[i])
		}
	}
	if math.Abs(windowed[128]-whole[128]) < 1e-3 && math.Abs(windowed[129]-whole[129]) < 1e-3 {
		t.Errorf("the second window's first tokens score as with the whole prefix: not windowed")
	}
}

// TestCompressRealText compresses real text with the draft: the budget is met, the kept
// tokens are the original's in order, and they are the more surprising ones.
func TestCompressRealText(t *testing.T) {
	eng := openDraft(t)
	text, err := os.ReadFile(testdata.Path(t, "corpus/tinystories_excerpt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sc := EngineScorer{Engine: eng}
	context_ := string(text[:1500])
	question := "What did the cherry tree learn?"
	res, err := Compress(context.Background(), sc, []Part{{Text: context_}, {Text: question, Keep: true}}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if want := int(math.Round(0.5 * float64(res.OriginalTokens))); res.KeptTokens != want {
		t.Errorf("kept %d of %d tokens, want %d", res.KeptTokens, res.OriginalTokens, want)
	}
	if res.Parts[1] != question {
		t.Errorf("question changed to %q", res.Parts[1])
	}
	// The kept text's tokens (sentence by sentence, as Compress tokenized them) contain
	// every kept token in order: check the compressed context is a token subsequence.
	var orig []int32
	for _, s := range Sentences(context_) {
		ids, _ := sc.Encode(s)
		orig = append(orig, ids...)
	}
	all, err := sc.Surprisal(context.Background(), orig)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := sc.Encode(res.Parts[0])
	matched := commonSubsequence(orig, kept)
	var keptSum, droppedSum float64
	j := 0
	for i := range orig {
		if matched[i] {
			keptSum += all[i]
			j++
		} else {
			droppedSum += all[i]
		}
	}
	// Re-encoding joined tokens may merge a few differently; nearly all must match.
	if j < len(kept)*9/10 {
		t.Fatalf("only %d of %d kept tokens found in order in the original", j, len(kept))
	}
	keptMean, droppedMean := keptSum/float64(j), droppedSum/float64(len(orig)-j)
	if keptMean <= droppedMean+0.5 {
		t.Errorf("kept tokens' mean surprisal %.2f, dropped %.2f: want the kept clearly more surprising", keptMean, droppedMean)
	}
	t.Logf("%d -> %d tokens; mean surprisal kept %.2f, dropped %.2f; %q", res.OriginalTokens, res.KeptTokens, keptMean, droppedMean, res.Text()[:min(200, len(res.Text()))])
}

// commonSubsequence marks the tokens of a that a longest common subsequence of a and b
// uses.
func commonSubsequence(a, b []int32) []bool {
	n := make([][]int, len(a)+1)
	for i := range n {
		n[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				n[i][j] = n[i+1][j+1] + 1
			} else {
				n[i][j] = max(n[i+1][j], n[i][j+1])
			}
		}
	}
	used := make([]bool, len(a))
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			used[i] = true
			i, j = i+1, j+1
		case n[i+1][j] >= n[i][j+1]:
			i++
		default:
			j++
		}
	}
	return used
}
