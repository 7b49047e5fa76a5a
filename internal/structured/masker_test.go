package structured

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// listVocab is a vocabulary given as token texts; ids listed in eog end generation and
// ids in special are control tokens.
type listVocab struct {
	toks    []string
	eog     map[int]bool
	special map[int]bool
}

func (v *listVocab) NumTokens() int           { return len(v.toks) }
func (v *listVocab) TokenBytes(id int) []byte { return []byte(v.toks[id]) }
func (v *listVocab) IsSpecial(id int) bool    { return v.special[id] || v.eog[id] }
func (v *listVocab) IsEOG(id int) bool        { return v.eog[id] }

// smallVocab has every ASCII byte as a token, some longer pieces, an EOG and a special.
func smallVocab() *listVocab {
	v := &listVocab{eog: map[int]bool{}, special: map[int]bool{}}
	for b := 0; b < 128; b++ {
		v.toks = append(v.toks, string(rune(b)))
	}
	v.toks = append(v.toks, `{"`, `":`, `",`, `"}`, ` "`, `true`, `null`, `12`, `0.`, `aa`, `ab`, `abc`, `é`, "\xc3", "\xa9", `{}`, `[]`, `, `, `  `, "\n\n")
	v.eog[len(v.toks)] = true
	v.toks = append(v.toks, "</s>")
	v.special[len(v.toks)] = true
	v.toks = append(v.toks, "<tool>")
	return v
}

// referenceMask is the mask by definition: a token is allowed when feeding its bytes one by
// one to the matcher succeeds (they are rolled back after); EOG when the output is complete (or when no token
// fits at all).
func referenceMask(m *Matcher, v Vocabulary) sample.Mask {
	n := v.NumTokens()
	mask := make(sample.Mask, sample.MaskWords(n))
	any := false
	for id := range n {
		if v.IsEOG(id) || v.IsSpecial(id) {
			continue
		}
		b := v.TokenBytes(id)
		if len(b) == 0 {
			continue
		}
		fed := 0
		for fed < len(b) && m.AcceptByte(b[fed]) {
			fed++
		}
		m.Rollback(fed)
		if fed == len(b) {
			mask.Set(int32(id))
			any = true
		}
	}
	if m.Accepting() || !any {
		for id := range n {
			if v.IsEOG(id) {
				mask.Set(int32(id))
			}
		}
	}
	return mask
}

func allowedIDs(m sample.Mask, n int) []int32 {
	var ids []int32
	for id := range n {
		if m.Allows(int32(id)) {
			ids = append(ids, int32(id))
		}
	}
	return ids
}

// checkGeneration samples random allowed tokens from the masker and compares every mask
// with the reference, exercising Rollback and Clone on the way.
func checkGeneration(t *testing.T, name string, c *Compiled, v Vocabulary, steps int, seed uint64) int {
	t.Helper()
	trie, err := NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	k := NewTokenGrammar(c, trie, v).NewMasker()
	n := v.NumTokens()
	for step := 0; step < steps; step++ {
		got := k.Mask()
		want := referenceMask(k.m, v)
		for w := range want {
			if got[w] != want[w] {
				g, r := allowedIDs(got, n), allowedIDs(want, n)
				t.Fatalf("%s step %d after %q: mask differs: %d allowed, reference %d (first: %v vs %v)",
					name, step, k.output(), len(g), len(r), head(g), head(r))
			}
		}
		ids := allowedIDs(got, n)
		if len(ids) == 0 {
			t.Fatalf("%s step %d: empty mask", name, step)
		}
		tok := ids[rng.IntN(len(ids))]
		if v.IsEOG(int(tok)) && !k.Accepting() {
			// a dead end: no token spells a continuation; the masker offers EOG and
			// refuses it, so the sequence ends with an error
			if len(ids) != len(trie.eog) || k.Accept([]int32{tok}) == nil {
				t.Fatalf("%s: dead end after %q: mask %v, EOG accepted", name, k.output(), head(ids))
			}
			t.Logf("%s: dead end after %d steps, %q", name, step, k.output())
			return step
		}
		if v.IsEOG(int(tok)) {
			if err := k.Accept([]int32{tok}); err != nil {
				t.Fatalf("%s: EOG refused: %v", name, err)
			}
			if !c.Matches(string(k.output())) {
				t.Fatalf("%s: output %q ended but does not match", name, k.output())
			}
			return step
		}
		// a speculative detour: accept a few allowed tokens, then roll them back
		before := string(k.output())
		clone := k.Clone().(*Masker)
		if err := k.Accept([]int32{tok}); err != nil {
			t.Fatalf("%s step %d: allowed token %d refused: %v", name, step, tok, err)
		}
		if rng.IntN(3) == 0 {
			k.Rollback(1)
			if string(k.output()) != before {
				t.Fatalf("%s: rollback left %q, want %q", name, k.output(), before)
			}
			if err := k.Accept([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		}
		if string(clone.output()) != before {
			t.Fatalf("%s: clone changed with its original: %q", name, clone.output())
		}
	}
	return steps
}

func head(ids []int32) []int32 { return ids[:min(len(ids), 8)] }

// output returns the bytes accepted so far (for messages).
func (k *Masker) output() []byte {
	return k.m.input
}

var testGrammars = map[string]string{
	"json":   jsonGBNF,
	"list":   `root ::= "[" ( item ("," " "? item)* )? "]"   item ::= [a-c]+ | "null" | "true"`,
	"nested": `root ::= e  e ::= "(" e* ")" | "x" [0-9]{0,3}`,
	"words":  `root ::= ("ab" | "abc" | "é" | " " | "\n"){0,12}`,
	"story":  `root ::= "Once upon a time" ("," | " " [a-z]+ | " " ("Tim" | "Lily")){1,24} "." [ \n]{0,2}`,
}

func TestMaskerAgainstReferenceSmallVocab(t *testing.T) {
	v := smallVocab()
	total := 0
	for name, src := range testGrammars {
		c := mustGBNF(t, src)
		for seed := range uint64(8) {
			total += checkGeneration(t, name, c, v, 60, seed)
		}
	}
	requireSteps(t, total, 500)
}

// requireSteps fails a test whose generations made fewer than min steps in all (a
// vocabulary that cannot spell the grammars would test nothing).
func requireSteps(t *testing.T, total, min int) {
	t.Helper()
	if total < min {
		t.Fatalf("the generations made %d steps in all, want at least %d", total, min)
	}
}

func loadHF(t testing.TB, rel string) *tokenizer.Tokenizer {
	t.Helper()
	dir := testdata.Path(t, rel)
	js, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	return newTokenizer(t)(tokenizer.VocabFromHF(js, cfg))
}

// newTokenizer returns a function building the tokenizer of a vocabulary loaded with err.
func newTokenizer(t testing.TB) func(*tokenizer.Vocab, error) *tokenizer.Tokenizer {
	return func(voc *tokenizer.Vocab, err error) *tokenizer.Tokenizer {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.New(voc)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
}

func loadLlama3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	dir := testdata.Path(t, "tokenizers/llama3")
	return newTokenizer(t)(tokenizer.VocabFromLlama3Files(filepath.Join(dir, "encoder.json"), filepath.Join(dir, "vocab.bpe")))
}

func TestMaskerAgainstReferenceTinyStories(t *testing.T) {
	v := loadHF(t, "models/tinystories-656k")
	total := 0
	for name, src := range testGrammars {
		c := mustGBNF(t, src)
		for seed := range uint64(3) {
			total += checkGeneration(t, name, c, v, 40, seed)
		}
	}
	requireSteps(t, total, 100)
}

// TestMaskerAgainstReferenceLlama3 checks masks on the 128k Llama 3 vocabulary (the
// reference matches every token byte by byte, so the generations are short).
func TestMaskerAgainstReferenceLlama3(t *testing.T) {
	v := loadLlama3(t)
	steps := 12
	if testing.Short() {
		steps = 4
	}
	total := 0
	for _, name := range []string{"json", "list"} {
		total += checkGeneration(t, name, mustGBNF(t, testGrammars[name]), v, steps, 1)
	}
	requireSteps(t, total, 2*steps)
}

func TestMaskerAgainstReferenceQwen3(t *testing.T) {
	v := loadHF(t, "tokenizers/qwen3")
	requireSteps(t, checkGeneration(t, "nested", mustGBNF(t, testGrammars["nested"]), v, 6, 2), 2)
}

// TestMaskerAgainstReferenceStories260K uses a SentencePiece vocabulary of 512 tokens with
// byte fallback tokens (<0x0A> ...).
func TestMaskerAgainstReferenceStories260K(t *testing.T) {
	v := newTokenizer(t)(format.LoadVocab(testdata.Path(t, "models/stories260K/tok512.bin"), 0))
	total := 0
	for name, src := range testGrammars {
		for seed := range uint64(3) {
			total += checkGeneration(t, name, mustGBNF(t, src), v, 40, seed)
		}
	}
	requireSteps(t, total, 100)
}

// longStringGrammars are lowered the ways long JSON strings are (see
// TestLongStringsLowering): a counted repetition shared as its own terminal, and a group
// counting a longer one out in blocks with the closing quote taken into each alternative.
var longStringGrammars = map[string]string{
	"shared": `root ::= "{" ("\"a\":" "\"" (char){0,150} "\"" | "\"b\":" "\"" (char){0,150} "\"" ("," "\"a\":" "\"" (char){0,150} "\"")?) "}"
char ::= [^"\\] | "\\" ["\\/bfnrt]`,
	"blocks": `root ::= "[" "\"" (((char){100}){0,2} (char){0,99} | ((char){100}){3} (char){0,5}) "\"" "]"
char ::= [^"\\] | "\\" ["\\/bfnrt]`,
}

// TestMaskerAgainstReferenceLongStrings compares masks with the byte-by-byte reference
// over random generations from those grammars.
func TestMaskerAgainstReferenceLongStrings(t *testing.T) {
	v := smallVocab()
	total := 0
	for name, src := range longStringGrammars {
		c := mustGBNF(t, src)
		if c.NumRules() < 3 {
			t.Fatalf("%s: %d parser rules: not lowered as long strings are", name, c.NumRules())
		}
		for seed := range uint64(12) {
			total += checkGeneration(t, name, c, v, 80, seed)
		}
	}
	requireSteps(t, total, 300)
	llama := loadLlama3(t)
	steps := 0
	for name, src := range longStringGrammars {
		steps += checkGeneration(t, name, mustGBNF(t, src), llama, 4, 1)
	}
	requireSteps(t, steps, 4)
}
