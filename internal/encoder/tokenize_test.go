package encoder

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// TestTokenizeBGEVectors runs llama.cpp's bert-bge vocabulary vectors through Tokenize:
// each text's ids, framed by [CLS] (101) and [SEP] (102) as bge's tokenizer frames them.
func TestTokenizeBGEVectors(t *testing.T) {
	dir := testdata.Path(t, "tokenizers/vocab")
	name := filepath.Join(dir, "ggml-vocab-bert-bge.gguf")
	v, err := format.LoadVocab(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	inp, err := os.ReadFile(name + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(name + ".out")
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(texts) != len(lines) || len(texts) < 10 {
		t.Fatalf("%d texts, %d output lines", len(texts), len(lines))
	}
	for i, text := range texts {
		want := []int32{101}
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, int32(id))
		}
		want = append(want, 102)
		if got := Tokenize(tok, text); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", text, got, want)
		}
	}
	toks, types := TokenizePair(tok, v, "Hello world", "how are you")
	if toks[0] != 101 || toks[len(toks)-1] != 102 || types[0] != 0 || types[len(types)-1] != 1 || len(toks) != len(types) {
		t.Errorf("pair: %v, types %v", toks, types)
	}
	if n := slices.Index(toks, 102); n < 1 || types[n] != 0 || types[n+1] != 1 {
		t.Errorf("pair: the first [SEP] at %d ends segment 0: %v %v", n, toks, types)
	}
}

// TestSynthTokenizerTwins: the synthesized GGUF vocabulary and the tokenizer.json of the
// folder (WordPiece with ## continuations, rewritten on load) tokenize alike.
func TestSynthTokenizerTwins(t *testing.T) {
	g, h := synthFile(t, "bert-tiny", "gguf"), synthFile(t, "bert-tiny", "hf")
	tg, err := tokenizer.New(g.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	th, err := tokenizer.New(h.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"Hello world", "the quick brown fox jumps", "Paris, the capital of France!", "unknownword xyz", "Über café"} {
		a, b := Tokenize(tg, text), Tokenize(th, text)
		if !slices.Equal(a, b) || len(a) < 3 || a[0] != 2 || a[len(a)-1] != 3 {
			t.Errorf("%q: gguf %v, hf %v", text, a, b)
		}
	}
	if got := Tokenize(tg, "hello"); len(got) != 3 {
		t.Errorf("a word of the vocabulary is one token: %v", got)
	}
}
