package tokenizer

import (
	"reflect"
	"testing"
)

// synthSPM is a small SentencePiece vocab with control, user-defined and stripping tokens.
func synthSPM(t *testing.T) *Tokenizer {
	t.Helper()
	tokens := []string{"<unk>", "<s>", "</s>", "<|ctl|>", "<|user|>", "<|u|>", "<L>", "<R>", "▁", "a", "b", "▁a"}
	types := []TokenType{TypeUnknown, TypeControl, TypeControl, TypeControl, TypeUserDefined, TypeUserDefined,
		TypeUserDefined, TypeUserDefined, TypeNormal, TypeNormal, TypeNormal, TypeNormal}
	v := &Vocab{Model: "llama", Tokens: tokens, Types: types, Scores: make([]float32, len(tokens)),
		BOS: 1, EOS: 2, UNK: 0, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1,
		AddBOS: true, AddSpacePrefix: true, Strip: map[int]Strip{6: StripLeft, 7: StripRight}}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestPartition(t *testing.T) {
	tok := synthSPM(t)
	raw := func(s string) fragment { return fragment{id: -1, text: s} }
	sp := func(id int) fragment { return fragment{id: id} }
	tests := []struct {
		in    string
		parse bool
		want  []fragment
	}{
		{"", true, nil},
		{"plain", true, []fragment{raw("plain")}},
		{"a<s>b", true, []fragment{raw("a"), sp(1), raw("b")}},
		{"a<s>b", false, []fragment{raw("a<s>b")}},                    // control needs ParseSpecial
		{"a<unk>b", false, []fragment{raw("a<unk>b")}},                // so does unknown
		{"a<unk>b", true, []fragment{raw("a"), sp(0), raw("b")}},      //
		{"x<|user|>y", false, []fragment{raw("x"), sp(4), raw("y")}},  // user-defined always
		{"<|user|><|u|>", false, []fragment{sp(4), sp(5)}},            // longest first
		{"<s><s></s>", true, []fragment{sp(1), sp(1), sp(2)}},         //
		{"a \t<L> b", false, []fragment{raw("a"), sp(6), raw(" b")}},  // lstrip
		{"  <L>", false, []fragment{sp(6)}},                           //
		{"a <R> \n b", false, []fragment{raw("a "), sp(7), raw("b")}}, // rstrip
		{"<R>  ", false, []fragment{sp(7)}},                           //
	}
	for _, tc := range tests {
		got := tok.partition(tc.in, tc.parse)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("partition(%q, %v) = %v, want %v", tc.in, tc.parse, got, tc.want)
		}
	}
}

func TestEncodeSpecialSynthetic(t *testing.T) {
	tok := synthSPM(t)
	tests := []struct {
		in   string
		opt  EncodeOptions
		want []int
	}{
		{"", EncodeOptions{AddSpecial: true}, []int{1}},
		{"", EncodeOptions{}, []int{}},
		{"a", EncodeOptions{AddSpecial: true}, []int{1, 11}},
		{"ab", EncodeOptions{}, []int{11, 10}},
		// A dummy prefix goes before text after a special token too, as in llama.cpp.
		{"a<s>a", EncodeOptions{ParseSpecial: true}, []int{11, 1, 11}},
		{"<|user|>a", EncodeOptions{}, []int{4, 11}},
		// Characters with no token fall back to bytes, and to <unk> without byte tokens.
		{"c", EncodeOptions{}, []int{8, 0}},
	}
	for _, tc := range tests {
		got := tok.Encode(tc.in, tc.opt)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%q, %+v) = %v, want %v", tc.in, tc.opt, got, tc.want)
		}
	}
}

func TestEncodeSpecialLlama(t *testing.T) {
	tok := loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	hello := tok.Encode("Hello", EncodeOptions{})
	got := tok.Encode("<s>Hello</s>", EncodeOptions{ParseSpecial: true})
	want := append(append([]int{1}, hello...), 2)
	if !equalIDs(got, want) {
		t.Fatalf("parse special: got %v, want %v", got, want)
	}
	plain := tok.Encode("<s>Hello</s>", EncodeOptions{})
	for _, id := range plain {
		if id == 1 || id == 2 {
			t.Fatalf("without ParseSpecial the text <s> became a special token: %v", plain)
		}
	}
	if s := tok.Decode(plain, true); s != "<s>Hello</s>" {
		t.Fatalf("round trip of special texts: %q", s)
	}
	if s := tok.Decode(got, false); s != "<s> Hello</s>" {
		t.Fatalf("Decode with specials = %q", s)
	}
	if s := tok.Decode(got, true); s != "Hello" {
		t.Fatalf("Decode skipping specials = %q", s)
	}
}

// TestEncodeSpecialPhi3: Phi-3's special tokens swallow the whitespace after them, and its
// user-defined </s> is matched even without ParseSpecial.
func TestEncodeSpecialPhi3(t *testing.T) {
	tok := loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-phi-3.gguf")
	enc := func(s string, parse bool) []int { return tok.Encode(s, EncodeOptions{ParseSpecial: parse}) }
	got := enc("<|user|>\nHi there<|end|>\n<|assistant|>", true)
	var want []int
	want = append(want, 32010)
	want = append(want, enc("Hi there", false)...)
	want = append(want, 32007, 32001)
	if !equalIDs(got, want) {
		t.Fatalf("chat: got %v, want %v", got, want)
	}
	got = enc("a</s>  b", false)
	want = append(append(enc("a", false), 2), enc("b", false)...)
	if !equalIDs(got, want) {
		t.Fatalf("user-defined </s>: got %v, want %v", got, want)
	}
	if !tok.IsEOG(32000) || !tok.IsEOG(32007) || tok.IsEOG(32010) {
		t.Fatalf("IsEOG: endoftext %v end %v user %v", tok.IsEOG(32000), tok.IsEOG(32007), tok.IsEOG(32010))
	}
}
