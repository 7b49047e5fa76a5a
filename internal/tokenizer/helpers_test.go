package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// vocabCase is one llama.cpp tokenizer test vector: input text and expected ids (no BOS,
// special tokens not parsed).
type vocabCase struct {
	text string
	ids  []int
}

// readVocabCases reads tokenizers/vocab/NAME.inp and .out: cases in .inp are separated by
// "\n__ggml_vocab_test__\n" (which also ends the file), .out has one line of ids per case.
func readVocabCases(t testing.TB, name string) []vocabCase {
	t.Helper()
	inp, err := os.ReadFile(testdata.Path(t, "tokenizers/vocab/"+name+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	outb, err := os.ReadFile(testdata.Path(t, "tokenizers/vocab/"+name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	texts := strings.Split(string(inp), sep)
	if texts[len(texts)-1] != "" {
		t.Fatalf("%s.inp does not end with the separator", name)
	}
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(outb), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d inputs but %d output lines", name, len(texts), len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i, text := range texts {
		cases[i].text = text
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", name, i+1, err)
			}
			cases[i].ids = append(cases[i].ids, id)
		}
	}
	return cases
}

// ReadGGUFVocab reads the vocabulary embedded in a GGUF file, for tests that use llama.cpp's
// vocab GGUF files as fixtures. The reader lives in package format, which imports this
// package, so these tests cannot import it: gguf_vocab_test.go, in package tokenizer_test,
// sets ReadGGUFVocab when the test binary starts.
var ReadGGUFVocab func(path string) (*Vocab, error)

// loadGGUFTokenizer opens a shared GGUF file and builds its tokenizer.
func loadGGUFTokenizer(t testing.TB, rel string) *Tokenizer {
	t.Helper()
	v, err := ReadGGUFVocab(testdata.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func equalIDs(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runVocabVectors checks Encode (no BOS, no special parsing) against llama.cpp's vectors.
func runVocabVectors(t *testing.T, name string) *Tokenizer {
	t.Helper()
	tok := loadGGUFTokenizer(t, "tokenizers/vocab/"+name)
	cases := readVocabCases(t, name)
	if len(cases) < 40 {
		t.Fatalf("%s: only %d cases", name, len(cases))
	}
	fails := 0
	for i, c := range cases {
		got := tok.Encode(c.text, EncodeOptions{})
		if !equalIDs(got, c.ids) {
			fails++
			t.Errorf("%s case %d %q:\n got %v\nwant %v", name, i, c.text, got, c.ids)
		}
	}
	return tok
}
