package promptcompress

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// wordScorer is a Scorer whose tokens are words (with the white space after them) and whose
// surprisal of a word is given by a table (default 1).
type wordScorer struct {
	vocab     []string
	ids       map[string]int32
	surprisal map[string]float64
	calls     int
}

func newWordScorer(surprisal map[string]float64) *wordScorer {
	return &wordScorer{ids: map[string]int32{}, surprisal: surprisal}
}

func (w *wordScorer) Encode(text string) ([]int32, error) {
	var out []int32
	for len(text) > 0 {
		// A token is a run of non-space and the white space after it.
		i := strings.IndexAny(text, " \n")
		if i < 0 {
			i = len(text)
		}
		i += len(text[i:]) - len(strings.TrimLeft(text[i:], " \n"))
		tok := text[:i]
		id, ok := w.ids[tok]
		if !ok {
			id = int32(len(w.vocab))
			w.vocab = append(w.vocab, tok)
			w.ids[tok] = id
		}
		out = append(out, id)
		text = text[i:]
	}
	return out, nil
}

func (w *wordScorer) Decode(ids []int32) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(w.vocab[id])
	}
	return b.String(), nil
}

func (w *wordScorer) Surprisal(_ context.Context, tokens []int32) ([]float64, error) {
	w.calls++
	out := make([]float64, len(tokens))
	for i, id := range tokens {
		v, ok := w.surprisal[strings.TrimSpace(w.vocab[id])]
		if !ok {
			v = 1
		}
		out[i] = v
	}
	return out, nil
}

func TestSentencesJoinBack(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"One. Two! Three? Four", []string{"One. ", "Two! ", "Three? ", "Four"}},
		{"He said \"no.\" Then left.\n\nNext line\nlast", []string{"He said \"no.\" ", "Then left.\n\n", "Next line\n", "last"}},
		{"3.14 is pi. e.g. this", []string{"3.14 is pi. ", "e.g. ", "this"}},
		{"", nil},
		{"\n\n", []string{"\n\n"}},
	} {
		got := Sentences(tc.text)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("Sentences(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

func FuzzSentences(f *testing.F) {
	for _, s := range []string{"One. Two! Three?", "a.\n\nb", "é. ü!\t\"x.\") y", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got := Sentences(text)
		if strings.Join(got, "") != text {
			t.Fatalf("Sentences(%q) = %q: does not join back", text, got)
		}
		for i, s := range got {
			if s == "" {
				t.Fatalf("Sentences(%q): sentence %d empty", text, i)
			}
		}
	})
}

func TestCheckRate(t *testing.T) {
	for _, r := range []float64{0, -0.5, 1.0001, math.NaN(), math.Inf(1)} {
		if err := CheckRate(r); !errors.Is(err, ErrRate) {
			t.Errorf("CheckRate(%v) = %v, want ErrRate", r, err)
		}
	}
	for _, r := range []float64{1e-9, 0.5, 1} {
		if err := CheckRate(r); err != nil {
			t.Errorf("CheckRate(%v) = %v", r, err)
		}
	}
	if _, err := Compress(context.Background(), newWordScorer(nil), []Part{{Text: "a b"}}, 1.5); !errors.Is(err, ErrRate) {
		t.Errorf("Compress at rate 1.5: %v, want ErrRate", err)
	}
}

// TestCompressCoarseToFine checks the budget controller on a prompt whose surprisals are
// known: the sentence of lowest mean surprisal goes whole (coarse), then the least
// surprising tokens of the rest (fine), the kept parts pass through, and the count is the
// budget exactly.
func TestCompressCoarseToFine(t *testing.T) {
	sc := newWordScorer(map[string]float64{
		"zebra": 9, "quartz": 8, "vivid": 7, "jumps": 6, // the informative words
		"the": 0.1, "a": 0.2, "of": 0.3,
	})
	instr := "Answer briefly.\n"
	context_ := "the zebra jumps over a quartz. the the a of the. vivid of a zebra. "
	question := "What jumps?"
	parts := []Part{{Text: instr, Keep: true}, {Text: context_}, {Text: question, Keep: true}}
	// Tokens: instr 2, context 6+5+4 = 15, question 2: 19 in all; rate 0.5 -> budget 10 (9.5
	// rounded half away from zero), so the context keeps 10-4 = 6 tokens. Coarse keeps
	// sentences by mean surprisal until 6*1.5 = 9 tokens.
	res, err := Compress(context.Background(), sc, parts, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if res.OriginalTokens != 19 || res.KeptTokens != 10 {
		t.Fatalf("tokens %d -> %d, want 19 -> 10", res.OriginalTokens, res.KeptTokens)
	}
	if res.Parts[0] != instr || res.Parts[2] != question {
		t.Errorf("kept parts changed: %q", res.Parts)
	}
	// Sentence means: "the zebra jumps over a quartz. " (0.1+9+6+1+0.2+1)/6 = 2.88 (the
	// final "quartz." is not "quartz": surprisal 1); "the the a of the. " ~0.16; "vivid of
	// a zebra. " (7+0.3+0.2+1)/4 = 2.125. Coarse: sentence 1 (6), then sentence 3 (10 >= 9);
	// sentence 2 goes whole. Fine: the 6 most surprising of those 10 tokens: zebra 9, vivid
	// 7, jumps 6, then the 1s in order: over, quartz., zebra.
	want := "zebra jumps over quartz. vivid zebra. "
	if res.Parts[1] != want {
		t.Errorf("context compressed to %q, want %q", res.Parts[1], want)
	}
	if res.Text() != instr+want+question {
		t.Errorf("Text() = %q", res.Text())
	}
}

// TestCompressBudgetEdges: rate 1 returns the prompt unscored; kept parts over the budget
// leave no context; an empty prompt compresses to itself.
func TestCompressBudgetEdges(t *testing.T) {
	sc := newWordScorer(nil)
	parts := []Part{{Text: "keep this whole", Keep: true}, {Text: "drop me. and me."}}
	res, err := Compress(context.Background(), sc, parts, 1)
	if err != nil || res.Text() != "keep this wholedrop me. and me." || res.KeptTokens != 7 || sc.calls != 0 {
		t.Errorf("rate 1: %+v, %v, %d scorings", res, err, sc.calls)
	}
	res, err = Compress(context.Background(), sc, parts, 0.2)
	if err != nil || res.Parts[0] != "keep this whole" || res.Parts[1] != "" || res.KeptTokens != 3 {
		t.Errorf("kept parts over the budget: %+v, %v", res, err)
	}
	res, err = Compress(context.Background(), sc, []Part{{Text: ""}}, 0.5)
	if err != nil || res.Text() != "" || res.OriginalTokens != 0 {
		t.Errorf("empty prompt: %+v, %v", res, err)
	}
}

// failingScorer fails to score.
type failingScorer struct{ *wordScorer }

func (failingScorer) Surprisal(context.Context, []int32) ([]float64, error) {
	return nil, errors.New("model gone")
}

func TestCompressScorerError(t *testing.T) {
	_, err := Compress(context.Background(), failingScorer{newWordScorer(nil)}, []Part{{Text: "a b c. d e."}}, 0.5)
	if err == nil || !strings.Contains(err.Error(), "model gone") {
		t.Errorf("got %v, want the scorer's error", err)
	}
}
