package perplexity

import (
	"math"
	"slices"
	"testing"
)

// bigram is a Scorer over a vocabulary of 3 whose logits after token t are `strength` for
// token (t+shift)%3 and 0 for the others; it records the windows it is given.
type bigram struct {
	strength float32
	shift    int32
	windows  [][]int32
}

func (b *bigram) Vocab() int { return 3 }

func (b *bigram) Score(tokens []int32) ([]float32, error) {
	b.windows = append(b.windows, slices.Clone(tokens))
	out := make([]float32, 3*len(tokens))
	for i, t := range tokens {
		out[3*i+int((t+b.shift)%3)] = b.strength
	}
	return out, nil
}

// Probabilities under bigram{strength: 2, shift: 1}, by hand: e^2/(e^2+2) for the
// predicted token, 1/(e^2+2) for each other.
var (
	pHit  = math.Exp(2) / (math.Exp(2) + 2)
	pMiss = 1 / (math.Exp(2) + 2)
)

func TestNonOverlappingWindows(t *testing.T) {
	// ctx 4: windows at 0 and 4 (the 9th token is left over); position 2 of each is
	// scored, predicting position 3: window 1 sees 2 -> 0 (a hit), window 2 sees 1 -> 0
	// (a miss).
	tokens := []int32{0, 1, 2, 0, 1, 1, 1, 0, 2}
	m := &bigram{strength: 2, shift: 1}
	var seen []int
	res, err := Evaluate(m, nil, tokens, Options{Ctx: 4, BOS: 2, Progress: func(w, n int, _ float64) { seen = append(seen, w, n) }})
	if err != nil {
		t.Fatal(err)
	}
	l1, l2 := -math.Log(pHit), -math.Log(pMiss)
	mean := (l1 + l2) / 2
	wantPPL := math.Exp(mean)
	wantErr := math.Sqrt((l1*l1+l2*l2)/2-mean*mean) * wantPPL
	if res.Tokens != 2 || res.Windows != 2 || res.Ctx != 4 {
		t.Fatalf("tokens %d windows %d ctx %d, want 2, 2, 4", res.Tokens, res.Windows, res.Ctx)
	}
	if math.Abs(res.Perplexity-wantPPL) > 1e-9 || math.Abs(res.StdErr-wantErr) > 1e-9 {
		t.Fatalf("PPL %v +/- %v, want %v +/- %v", res.Perplexity, res.StdErr, wantPPL, wantErr)
	}
	wantWindows := [][]int32{{2, 1, 2, 0}, {2, 1, 1, 0}}
	if !slices.EqualFunc(m.windows, wantWindows, slices.Equal) {
		t.Fatalf("windows %v, want %v (each starting with BOS)", m.windows, wantWindows)
	}
	if !slices.Equal(seen, []int{1, 2, 2, 2}) {
		t.Fatalf("progress calls %v", seen)
	}
}

func TestStridedWindows(t *testing.T) {
	// ctx 4, stride 2: windows of 4+1 = 5 tokens at 0, 2, 4 ((11-5+1)/2 = 3 of them),
	// each scoring positions 2 and 3.
	tokens := []int32{0, 1, 2, 0, 1, 1, 1, 0, 2, 2, 0}
	m := &bigram{strength: 2, shift: 1}
	res, err := Evaluate(m, nil, tokens, Options{Ctx: 4, Stride: 2, BOS: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The windows keep their own first tokens, as llama.cpp's strided path evaluates them.
	wantWindows := [][]int32{{0, 1, 2, 0, 1}, {2, 0, 1, 1, 1}, {1, 1, 1, 0, 2}}
	if !slices.EqualFunc(m.windows, wantWindows, slices.Equal) {
		t.Fatalf("windows %v, want %v", m.windows, wantWindows)
	}
	// Predictions (token at start+j -> start+j+1, j = 2, 3): start 0: 2->0 hit, 0->1 hit;
	// start 2: 1->1 miss, 1->1 miss; start 4: 1->0 miss, 0->2 miss.
	want := math.Exp(-(2*math.Log(pHit) + 4*math.Log(pMiss)) / 6)
	if res.Tokens != 6 || res.Windows != 3 || res.Ctx != 5 || math.Abs(res.Perplexity-want) > 1e-9 {
		t.Fatalf("tokens %d windows %d ctx %d PPL %v, want 6, 3, 5, %v", res.Tokens, res.Windows, res.Ctx, res.Perplexity, want)
	}
}

func TestMaxWindows(t *testing.T) {
	tokens := []int32{0, 1, 2, 0, 1, 1, 1, 0, 2}
	m := &bigram{strength: 2, shift: 1}
	res, err := Evaluate(m, nil, tokens, Options{Ctx: 4, BOS: 2, MaxWindows: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Windows != 1 || res.Tokens != 1 || math.Abs(res.Perplexity-1/pHit) > 1e-9 || len(m.windows) != 1 {
		t.Fatalf("one window: %+v after %d calls, want PPL %v", res, len(m.windows), 1/pHit)
	}
}

func TestKLAgainstReference(t *testing.T) {
	tokens := []int32{0, 1, 2, 0, 1, 1, 1, 0, 2}
	// The same shape of distribution, sharper: KL(base || m) by hand for one position, the
	// same at every position; the most likely tokens agree.
	m, base := &bigram{strength: 2, shift: 1}, &bigram{strength: 3, shift: 1}
	res, err := Evaluate(m, base, tokens, Options{Ctx: 4, BOS: 2})
	if err != nil {
		t.Fatal(err)
	}
	bHit, bMiss := math.Exp(3)/(math.Exp(3)+2), 1/(math.Exp(3)+2)
	want := bHit*math.Log(bHit/pHit) + 2*bMiss*math.Log(bMiss/pMiss)
	if math.Abs(res.KLDivergence-want) > 1e-9 || res.Top1Agreement != 1 {
		t.Fatalf("KL %v top-1 %v, want %v and 1", res.KLDivergence, res.Top1Agreement, want)
	}
	// A reference predicting another token never agrees on the first place.
	res, err = Evaluate(m, &bigram{strength: 2, shift: 2}, tokens, Options{Ctx: 4, BOS: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Top1Agreement != 0 || res.KLDivergence <= 0 {
		t.Fatalf("disagreeing reference: KL %v top-1 %v, want > 0 and 0", res.KLDivergence, res.Top1Agreement)
	}
}

func TestRefusals(t *testing.T) {
	tokens := make([]int32, 10)
	for _, opt := range []Options{{Ctx: 2}, {Ctx: 8}, {Ctx: 4, Stride: 4}, {Ctx: 4, Stride: -1}, {Ctx: 6, Stride: 3}} {
		if _, err := Evaluate(&bigram{}, nil, tokens, opt); err == nil {
			t.Errorf("options %+v on 10 tokens: no error", opt)
		}
	}
}
