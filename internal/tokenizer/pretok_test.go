package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The oracles run the original expressions (hfRegex*, hfDeepSeekLLMRegexes: as HF
// tokenizer.json files and llama.cpp spell them) with regexp2, a backtracking engine with
// lookahead like Oniguruma, against the hand-written scanners.

// oracle splits text with a sequence of expressions the way HF's Split(Isolated) does:
// matches and the gaps between them become pieces.
type oracle []*regexp2.Regexp

func newOracle(t testing.TB, exprs ...string) oracle {
	t.Helper()
	var o oracle
	for _, e := range exprs {
		re, err := regexp2.Compile(e)
		if err != nil {
			t.Fatalf("compile %q: %v", e, err)
		}
		o = append(o, re)
	}
	return o
}

func (o oracle) split(t testing.TB, text string) []string {
	t.Helper()
	pieces := []string{text}
	for _, re := range o {
		var next []string
		for _, p := range pieces {
			locs, err := re.FindAllStringIndex(p, -1)
			if err != nil {
				t.Fatalf("regexp2 on %q: %v", p, err)
			}
			at := 0
			for _, l := range locs {
				if l[0] > at {
					next = append(next, p[at:l[0]])
				}
				if l[1] > l[0] {
					next = append(next, p[l[0]:l[1]])
				}
				at = l[1]
			}
			if at < len(p) {
				next = append(next, p[at:])
			}
		}
		pieces = next
	}
	return pieces
}

// collectWords returns the words split yields for text.
func collectWords(split preTokenizer, text string) []string {
	var words []string
	split(text, func(w string) { words = append(words, w) })
	return words
}

// pretokFamily pairs a scanner with its oracle expressions.
type pretokFamily struct {
	name  string
	split preTokenizer
	exprs []string
}

var pretokFamilies = []pretokFamily{
	{"gpt-2", splitGPT2, []string{hfRegexGPT2}},
	{"llama-bpe", splitLlama3, []string{hfRegexLlama3}},
	{"qwen2", splitQwen2, []string{hfRegexQwen2}},
	{"deepseek-llm", splitDeepSeekLLM, hfDeepSeekLLMRegexes},
}

func TestPreTokenizerExamples(t *testing.T) {
	cases := []struct {
		split preTokenizer
		text  string
		want  []string
	}{
		{splitGPT2, "Hello world", []string{"Hello", " world"}},
		{splitGPT2, "I'm  here\n\n", []string{"I", "'m", " ", " here", "\n\n"}},
		{splitGPT2, "a\nb 12x", []string{"a", "\n", "b", " 12", "x"}},
		{splitGPT2, "I'M", []string{"I", "'", "M"}},
		{splitLlama3, "I'M 12345 x.cpp", []string{"I", "'M", " ", "123", "45", " x", ".cpp"}},
		{splitLlama3, "a  \n\n  b", []string{"a", "  \n\n", " ", " b"}},
		{splitLlama3, "!!\n\nx", []string{"!!\n\n", "x"}},
		{splitLlama3, "\tfoo   ", []string{"\tfoo", "   "}},
		{splitQwen2, "x 123", []string{"x", " ", "1", "2", "3"}},
		{splitDeepSeekLLM, "Hi 3.14 你好\n", []string{"Hi", " ", "3", ".", "14", " ", "你好", "\n"}},
	}
	for _, c := range cases {
		got := collectWords(c.split, c.text)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.text, got, c.want)
		}
	}
}

func TestPreTokenizerFor(t *testing.T) {
	for _, name := range []string{"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm"} {
		if _, err := preTokenizerFor(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := preTokenizerFor("no-such-model"); err == nil {
		t.Error("unknown pre-tokenizer name accepted")
	}
}

// pretokAlphabet holds characters that exercise every rule of the expressions: each class,
// line breaks and other spaces, contraction letters in both cases (and ſ, which case-folds to
// s), digits of several scripts, DeepSeek's letter, punctuation and CJK ranges and the
// characters at their edges, combining marks, emoji and invalid-looking U+FFFD.
var pretokAlphabet = []rune(" \t\n\r\v\f\u00a0\u3000\u2028\u0085  '''sStTrReEvVmMlLdDſKk" +
	"ab xyzAZé ü中文한국어ひらがなカ0123456789٣३Ⅻ½².,!?-_/:;@#$%^&*()[]{}<>`~\"|\\+=" +
	"\u0301\u200d\u200b😀🤖✅\ufffdµ\u01bb\u0294\u1f7d\u2126\u212a\u02b0！／：～‘‟。、ℂ𐐀𞤀\u0800\u9fa5\u9fa6\uac00\ud7ff" +
	"ไทยΣσǅʰㄱㄅ—…।،IMGB<>\uf900")

// pretokInput maps fuzz bytes onto the alphabet (one character per byte) so that random
// inputs are dense in interesting boundaries.
func pretokInput(data []byte) string {
	var sb strings.Builder
	for _, b := range data {
		sb.WriteRune(pretokAlphabet[int(b)%len(pretokAlphabet)])
	}
	return sb.String()
}

// checkPretok compares one family's scanner with its oracle on text.
func checkPretok(t *testing.T, f pretokFamily, o oracle, text string) {
	t.Helper()
	got := collectWords(f.split, text)
	if strings.Join(got, "") != text {
		t.Fatalf("%s: pieces %q do not cover %q", f.name, got, text)
	}
	for _, p := range got {
		if p == "" {
			t.Fatalf("%s: empty piece in %q for %q", f.name, got, text)
		}
	}
	want := o.split(t, text)
	if !slices.Equal(got, want) {
		t.Fatalf("%s on %q:\n got %q\nwant %q", f.name, text, got, want)
	}
}

// TestPreTokenizerDifferential runs a bounded set of random strings through every scanner and
// its oracle (the fuzz target below explores further).
func TestPreTokenizerDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range pretokFamilies {
		o := newOracle(t, f.exprs...)
		for i := 0; i < 1500; i++ {
			data := make([]byte, 1+rng.IntN(24))
			for k := range data {
				data[k] = byte(rng.UintN(256))
			}
			checkPretok(t, f, o, pretokInput(data))
		}
	}
}

// TestPreTokenizerVectorsInputs checks the scanners against the oracles on every input of
// llama.cpp's tokenizer test vectors.
func TestPreTokenizerVectorsInputs(t *testing.T) {
	cases := readVocabCases(t, "ggml-vocab-llama-bpe.gguf")
	for _, f := range pretokFamilies {
		o := newOracle(t, f.exprs...)
		for _, c := range cases {
			checkPretok(t, f, o, c.text)
		}
	}
}

// FuzzPretokenize checks every pre-tokenizer name's split against its family's expressions:
// the pieces cover the input, none is empty, they equal the oracle's, and nothing panics.
func FuzzPretokenize(f *testing.F) {
	for _, s := range []string{"", "Hello world", "I'm  here\n\n", "a  \n\n  b", "x 123 'S ſ", "\u3000。 a",
		"   ", "\t\n", "3.14 你好", "🦙.cpp ''''", "camelCase 1234567", "<sentinel:3>IMGIMGAZ"} {
		f.Add([]byte(s))
	}
	var fams []pretokFamily
	var oracles []oracle
	for _, pf := range preFamilies {
		for _, name := range pf.names {
			spec, err := preTokenizerFor(name)
			if err != nil {
				f.Fatal(err)
			}
			fams = append(fams, pretokFamily{name, spec.split, pf.exprs})
			oracles = append(oracles, newOracle(f, pf.exprs...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		texts := []string{pretokInput(data)}
		if utf8.Valid(data) {
			texts = append(texts, string(data))
		}
		for i, fam := range fams {
			for _, text := range texts {
				checkPretok(t, fam, oracles[i], text)
			}
		}
	})
}
