package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		s := byteLevelEncode([]byte{byte(b)})
		r := []rune(s)
		if len(r) != 1 {
			t.Fatalf("byte %#x encodes to %q, not one character", b, s)
		}
		if seen[r[0]] {
			t.Fatalf("byte %#x: character %q used twice", b, s)
		}
		seen[r[0]] = true
		if got := byteLevelDecode(s); !bytes.Equal(got, []byte{byte(b)}) {
			t.Fatalf("byte %#x: decode(%q) = %v", b, s, got)
		}
	}
	for b, want := range map[byte]string{' ': "Ġ", '\n': "Ċ", '\t': "ĉ", 'A': "A", 0x00: "Ā", 0x7F: "ġ", 0xAD: "Ń", 0xFF: "ÿ"} {
		if got := byteLevelEncode([]byte{b}); got != want {
			t.Errorf("byte %#x: got %q, want %q", b, got, want)
		}
	}
	if got := byteLevelDecode("ĠhelloĊ<think>中\xff"); string(got) != " hello\n<think>中\xff" {
		t.Errorf("decode kept-as-is characters: got %q", got)
	}
}

// tinyBPEVocab is a byte-level vocab with every byte plus the results of merges (except
// "cc", left out on purpose so that a merge result missing from the vocab is exercised).
func tinyBPEVocab(pre string) *Vocab {
	v := &Vocab{Model: "gpt2", Pre: pre, BOS: -1, EOS: -1, UNK: -1, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, byteLevelEncode([]byte{byte(b)}))
	}
	v.Merges = []string{"a a", "Ġ a", "b c", "a b", "aa a", "Ġa b", "c c", "cc cc", "b b", "bb bb", "a bb", "Ġ Ġ", "ĠĠ ĠĠ", "aa aa"}
	for _, m := range v.Merges {
		l, r, _ := splitMerge(m)
		if l+r != "cc" {
			v.Tokens = append(v.Tokens, l+r)
		}
	}
	v.Tokens = append(v.Tokens, "xyz") // a whole word with no merges leading to it
	return v
}

func tokenTexts(v *Vocab, ids []int) []string {
	var out []string
	for _, id := range ids {
		out = append(out, v.Tokens[id])
	}
	return out
}

func TestBPEMergeOrder(t *testing.T) {
	v := tinyBPEVocab("gpt-2")
	m, err := newBPE(v, v.Pre)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		text string
		want []string
	}{
		{"aaa", []string{"aaa"}},                // "a a" leftmost, then "aa a"
		{"aaaa", []string{"aaaa"}},              // aa aa
		{"aaaaa", []string{"aa", "aaa"}},        // "a a" twice (leftmost first), then "aa a" outranks "aa aa"
		{"abc", []string{"a", "bc"}},            // "b c" outranks "a b"
		{"abb", []string{"ab", "b"}},            // "a b" (rank 3) before "b b" (rank 8)
		{"ab", []string{"ab"}},                  //
		{" ab", []string{"Ġab"}},                // Ġ a, then Ġa b
		{"cc", []string{"c", "c"}},              // "cc" is no token: its bytes instead
		{"cccc", []string{"cccc"}},              // but "cc cc" still merges through it
		{"xyz", []string{"x", "y", "z"}},        // no merges: bytes
		{"a\n b", []string{"a", "Ċ", "Ġ", "b"}}, // pre-tokenized first
		{"     a", []string{"ĠĠĠĠ", "Ġa"}},      // whitespace run minus its last space
		{"bbbbbbbbb", []string{"bbbb", "bbbb", "b"}},
	}
	for _, c := range cases {
		got := tokenTexts(v, m.encode(c.text, nil, 0))
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.text, got, c.want)
		}
	}
}

func TestBPEIgnoreMerges(t *testing.T) {
	for _, c := range []struct {
		pre  string
		want []string
	}{
		{"gpt-2", []string{"x", "y", "z"}},
		{"llama-bpe", []string{"xyz"}}, // Llama 3: a word that is a token is taken whole
	} {
		v := tinyBPEVocab(c.pre)
		m, err := newBPE(v, v.Pre)
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenTexts(v, m.encode("xyz", nil, 0)); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.pre, got, c.want)
		}
	}
}

func TestNewBPEErrors(t *testing.T) {
	v := tinyBPEVocab("no-such-pre")
	if _, err := New(v); err == nil || !strings.Contains(err.Error(), "no-such-pre") {
		t.Errorf("unknown pre-tokenizer: err = %v", err)
	}
	v = tinyBPEVocab("gpt-2")
	v.Merges = append(v.Merges, "nospace")
	if _, err := newBPE(v, v.Pre); err == nil {
		t.Error("malformed merge accepted")
	}
}

// checkMergeTwins runs both merge strategies on the bytes of word and compares them.
func checkMergeTwins(t *testing.T, m *bpeModel, word string) {
	t.Helper()
	var a, b []int32
	for i := 0; i < len(word); i++ {
		a = append(a, m.byteSym[word[i]])
	}
	b = append(b, a...)
	scan := m.mergeScan(a)
	hp := m.mergeHeap(b)
	if !slices.Equal(scan, hp) {
		t.Fatalf("%q: scan %v, heap %v", word, scan, hp)
	}
}

// TestBPEMergeHeapMatchesScan checks the heap merge (long words) against the rescanning one
// (short words) on random words, with the tiny vocab and with Llama 3's.
func TestBPEMergeHeapMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tiny, err := newBPE(tinyBPEVocab("gpt-2"), "gpt-2")
	if err != nil {
		t.Fatal(err)
	}
	randWord := func(alphabet string, n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	for i := 0; i < 2000; i++ {
		checkMergeTwins(t, tiny, randWord("abc ", 1+rng.IntN(80)))
	}
	tok := loadLlama3(t)
	m := tok.enc.(*bpeModel)
	for i := 0; i < 300; i++ {
		checkMergeTwins(t, m, randWord("etaoinshrdlu ETAOIN0123.,'\n\xc3\xa9\xe4\xb8\xad", 1+rng.IntN(200)))
	}
}

func FuzzBPEEncode(f *testing.F) {
	for _, s := range []string{"", "aaa", "abc abb", "cccc  \n", "xyz", "a\xffb", "héllo 世界"} {
		f.Add(s)
	}
	v := tinyBPEVocab("gpt-2")
	tok, err := New(v)
	if err != nil {
		f.Fatal(err)
	}
	m := tok.enc.(*bpeModel)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, EncodeOptions{})
		if back := tok.Decode(ids, false); back != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, back)
		}
		splitGPT2(s, func(w string) { checkMergeTwins(t, m, w) })
	})
}
