package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// ugmTestVocab is a small unigram vocab whose best segmentations are worked out by hand in
// TestUGMViterbi.
func ugmTestVocab() *Vocab {
	v := newEmptyVocab("t5", "", 0)
	add := func(text string, typ TokenType, score float32) {
		v.Tokens = append(v.Tokens, text)
		v.Types = append(v.Types, typ)
		v.Scores = append(v.Scores, score)
	}
	add("<pad>", TypeControl, 0)      // 0
	add("</s>", TypeControl, 0)       // 1
	add("<unk>", TypeUnknown, 0)      // 2
	add("▁", TypeNormal, -2)          // 3
	add("▁a", TypeNormal, -1)         // 4
	add("b", TypeNormal, -2.5)        // 5
	add("▁ab", TypeNormal, -4)        // 6
	add("a", TypeNormal, -3)          // 7
	add("c", TypeNormal, -1.5)        // 8
	add("bc", TypeNormal, -3.2)       // 9
	add("<x>", TypeUserDefined, -100) // 10
	v.EOS, v.UNK, v.PAD = 1, 2, 0
	v.AddEOS, v.AddSpacePrefix = true, true
	return v
}

// TestUGMViterbi checks segmentations computed by hand. Scores of the candidates:
//
//	"ab"  -> ▁ab: ▁ab -4 | ▁a b -3.5 | ▁ a b -7.5          => ▁a b
//	"abc" -> ▁abc: ▁a bc -4.2 | ▁a b c -5 | ▁ab c -5.5    => ▁a bc
//	"ad"  -> ▁ad: d has no token, unknown scores -4-10 = -14: ▁a <unk> -15 | ▁ a <unk> -19
//	"add" -> ▁a <unk> <unk>, the two unknowns emitted as one
//	"a b" -> ▁a▁b: only ▁a ▁ b (-5.5)
//	"  a" -> ▁▁▁a (each space a ▁, then the prefix before the word): ▁ ▁ ▁a
//	"a<x>b" -> the user-defined token is split out first; each side gets its prefix
func TestUGMViterbi(t *testing.T) {
	tok, err := New(ugmTestVocab())
	if err != nil {
		t.Fatal(err)
	}
	if tok.Kind() != "unigram" {
		t.Fatalf("kind %q", tok.Kind())
	}
	for _, c := range []struct {
		text string
		want []int
	}{
		{"ab", []int{4, 5}},
		{"abc", []int{4, 9}},
		{"ad", []int{4, 2}},
		{"add", []int{4, 2}},
		{"a b", []int{4, 3, 5}},
		{"  a", []int{3, 3, 4}},
		{"a<x>b", []int{4, 10, 3, 5}},
		{"", nil},
	} {
		if got := tok.Encode(c.text, EncodeOptions{}); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.text, got, c.want)
		}
	}
	if got := tok.Encode("ab", EncodeOptions{AddSpecial: true}); !slices.Equal(got, []int{4, 5, 1}) {
		t.Errorf("with EOS: got %v", got)
	}
	if got := tok.Decode([]int{4, 9, 3, 5, 1}, true); got != "abc b" {
		t.Errorf("decode: %q", got)
	}
}

// TestUGMRemoveExtraSpaces: leading and trailing spaces go, runs merge, every word gets "▁".
func TestUGMRemoveExtraSpaces(t *testing.T) {
	v := ugmTestVocab()
	v.RemoveExtraSpaces = true
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("  a   b  ", EncodeOptions{}); !slices.Equal(got, []int{4, 3, 5}) {
		t.Errorf("got %v, want [4 3 5] (▁a ▁ b)", got)
	}
}

// handCharsMap builds a precompiled character map by hand: "A" -> "a" and "AB" -> "xy".
//
//	node 0:  root, BASE 1
//	node 64: 1^'A', check 'A', leaf, BASE 3  -> its value at 64^3 = 67
//	node 67: value, replacement offset 0 ("a")
//	node 1:  67^'B', check 'B', leaf, BASE 5 -> its value at 1^5 = 4
//	node 4:  value, replacement offset 2 ("xy")
func handCharsMap() []byte {
	nodes := make([]uint32, 68)
	nodes[0] = 1 << 10
	nodes[64] = 3<<10 | 1<<8 | 'A'
	nodes[67] = 1<<31 | 0
	nodes[1] = 5<<10 | 1<<8 | 'B'
	nodes[4] = 1<<31 | 2
	out := binary.LittleEndian.AppendUint32(nil, uint32(4*len(nodes)))
	for _, n := range nodes {
		out = binary.LittleEndian.AppendUint32(out, n)
	}
	return append(out, "a\x00xy\x00"...)
}

func TestUGMCharsMap(t *testing.T) {
	v := ugmTestVocab()
	v.CharsMap = handCharsMap()
	m := newUGM(v)
	if m.charsMap == nil {
		t.Fatal("character map not parsed")
	}
	// "AB" is the longest match at 0, then "A" alone, then "C" is not in the map.
	if got := m.normalize("ABAC"); got != "▁xyaC" {
		t.Errorf("normalize: %q", got)
	}
	if got := m.normalize("\xffb"); got != "▁\ufffdb" {
		t.Errorf("invalid byte: %q", got)
	}
	for _, bad := range [][]byte{nil, {1, 0}, {8, 0, 0, 0, 1}} {
		if parseCharsMap(bad) != nil {
			t.Errorf("malformed map %v accepted", bad)
		}
	}
}

// FuzzUGM: unigram encoding never panics and gives ids in range, with the hand-built
// character map and with any bytes taken for one (a malformed map is dropped, a corrupt one
// must not be read out of bounds).
func FuzzUGM(f *testing.F) {
	for _, s := range []string{"", "ab", "ABAC c", "  a<x>b  ", "\xff\x00A", "日本"} {
		f.Add(s, handCharsMap())
	}
	f.Add("AB", handCharsMap()[:40])
	f.Add("A", []byte{8, 0, 0, 0, 0, 4, 0, 0, 0xff, 0xff, 0xff, 0xff, 'x'})
	f.Fuzz(func(t *testing.T, s string, charsMap []byte) {
		v := ugmTestVocab()
		v.CharsMap = charsMap
		tok, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range tok.Encode(s, EncodeOptions{AddSpecial: true, ParseSpecial: true}) {
			if id < 0 || id >= tok.NumTokens() {
				t.Fatalf("id %d out of range", id)
			}
		}
	})
}

func TestRWKV(t *testing.T) {
	v := newEmptyVocab("rwkv", "", 0)
	v.Tokens = []string{"a", "ab", "abc", "b", "\\n", "\\x00", "c\\\\", "<unk>"}
	v.Types = []TokenType{1, 1, 1, 1, 1, 1, 1, 1}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	// Greedy longest match from the left: abc | ab | \n | \x00 | c\ ; "d" has no token and
	// the vocab no unknown token, so it is dropped.
	if got := tok.Encode("abcab\n\x00c\\d", EncodeOptions{}); !slices.Equal(got, []int{2, 1, 4, 5, 6}) {
		t.Errorf("got %v", got)
	}
	if got := tok.Decode([]int{2, 4, 5, 6}, false); got != "abc\n\x00c\\" {
		t.Errorf("decode %q", got)
	}
	v.UNK = 7
	tok, _ = New(v)
	if got := tok.Encode("abd", EncodeOptions{}); !slices.Equal(got, []int{1, 7}) {
		t.Errorf("with unk: got %v", got)
	}
	if got := rwkvUnescape(`\t\r\\\xzz\`); string(got) != "\t\r\\\\xzz\\" {
		t.Errorf("unescape %q", got)
	}
}

// hfUnigramJSON is a T5-style tokenizer.json with the vocab of ugmTestVocab.
func hfUnigramJSON(t testing.TB, charsMap []byte) []byte {
	t.Helper()
	v := ugmTestVocab()
	var entries [][]any
	for id, tok := range v.Tokens {
		entries = append(entries, []any{tok, v.Scores[id]})
	}
	vocab, _ := json.Marshal(entries)
	cm, _ := json.Marshal(charsMap)
	return fmt.Appendf(nil, `{
  "added_tokens": [
    {"id": 0, "content": "<pad>", "special": true}, {"id": 1, "content": "</s>", "special": true},
    {"id": 2, "content": "<unk>", "special": true}, {"id": 10, "content": "<x>", "special": false}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled", "precompiled_charsmap": %s},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}]},
  "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}]},
  "model": {"type": "Unigram", "unk_id": 2, "vocab": %s, "byte_fallback": false}
}`, cm, vocab)
}

// TestVocabFromHFUnigram: a Unigram tokenizer.json gives the same vocab and segmentations as
// the GGUF form (TestUGMViterbi's), with the character map and extra spaces removed.
func TestVocabFromHFUnigram(t *testing.T) {
	v, err := VocabFromHF(hfUnigramJSON(t, handCharsMap()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "t5" || v.UNK != 2 || v.EOS != 1 || !v.AddEOS || v.AddBOS || !v.AddSpacePrefix || !v.RemoveExtraSpaces {
		t.Fatalf("vocab: model %q unk %d eos %d addEOS %v addBOS %v prefix %v removeWS %v",
			v.Model, v.UNK, v.EOS, v.AddEOS, v.AddBOS, v.AddSpacePrefix, v.RemoveExtraSpaces)
	}
	if v.Types[10] != TypeUserDefined || v.Scores[4] != -1 {
		t.Errorf("types/scores: %v %v", v.Types[10], v.Scores[4])
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	// "  a   b " -> ▁a▁b; "abc" -> ▁a bc; "A" -> the map's "a" -> ▁a.
	for _, c := range []struct {
		text string
		want []int
	}{
		{"  a   b ", []int{4, 3, 5, 1}},
		{"abc", []int{4, 9, 1}},
		{"A", []int{4, 1}},
	} {
		if got := tok.Encode(c.text, EncodeOptions{AddSpecial: true}); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.text, got, c.want)
		}
	}
	bad := strings.Replace(string(hfUnigramJSON(t, nil)), `{"type": "WhitespaceSplit"}`, `{"type": "Punctuation"}`, 1)
	if _, err := VocabFromHF([]byte(bad), nil); err == nil || !strings.Contains(err.Error(), "Punctuation") {
		t.Errorf("unsupported pre-tokenizer: err = %v", err)
	}
	if _, err := VocabFromHF(hfUnigramJSON(t, []byte{9, 9}), nil); err == nil {
		t.Error("malformed charsmap accepted")
	}
}
