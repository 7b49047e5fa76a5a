package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// rawBPEVocab is a Gemma-4-style BPE vocab: plain UTF-8 tokens with "▁" for spaces and
// <0xNN> byte tokens.
func rawBPEVocab(model, pre string) *Vocab {
	v := newEmptyVocab(model, pre, 0)
	for _, tok := range []string{"a", "b", "▁", "▁a", "ab", "é", "\n", "\n\n", "<0xC3>", "<0xBC>", "<0x7A>", "▁ab"} {
		v.Tokens = append(v.Tokens, tok)
		typ := TypeNormal
		if _, ok := parseByteToken(tok); ok {
			typ = TypeByte
		}
		v.Types = append(v.Types, typ)
	}
	v.Merges = []string{"▁ a", "a b", "▁a b"}
	return v
}

// TestBPERaw works through Gemma 4's BPE by hand:
//
//	"a ab\n\nz" -> "a▁ab\n\nz" (spaces escaped) -> lines "a▁ab", "\n\n", "z"
//	"a▁ab": a ▁ a b; merge 0 (▁ a) -> a ▁a b; merge 2 (▁a b) -> a ▁ab          => 0 11
//	"\n\n": a word of line feeds that is a token is taken whole                 => 7
//	"z": no token, no merge: its byte <0x7A>                                    => 10
//	"üé": ü is unknown, its bytes <0xC3> <0xBC>; é is a token                   => 8 9 5
//	"\n\n\n": not a token, so merged as usual (no merge joins line feeds)        => 6 6 6
func TestBPERaw(t *testing.T) {
	for _, v := range []*Vocab{rawBPEVocab("gpt2", "gemma4"), rawBPEVocab("gemma4", "")} {
		tok, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			text string
			want []int
		}{
			{"a ab\n\nz", []int{0, 11, 7, 10}},
			{"üé", []int{8, 9, 5}},
			{"\n\n\n", []int{6, 6, 6}},
		} {
			if got := tok.Encode(c.text, EncodeOptions{}); !slices.Equal(got, c.want) {
				t.Errorf("%s/%s %q: got %v, want %v", v.Model, v.Pre, c.text, got, c.want)
			}
		}
		if got := tok.Decode([]int{0, 11, 7, 8, 9}, false); got != "a ab\n\nü" {
			t.Errorf("decode: %q", got)
		}
	}
	// "whitespace": raw tokens, no escaping; \S+ words and the spaces between them:
	// "hi" (h i merged), " ", "!" (its byte token).
	v := newEmptyVocab("gpt2", "whitespace", 0)
	v.Tokens = []string{"hi", " ", "<0x21>", "h", "i"}
	v.Types = []TokenType{TypeNormal, TypeNormal, TypeByte, TypeNormal, TypeNormal}
	v.Merges = []string{"h i"}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("hi !", EncodeOptions{}); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("whitespace: got %v", got)
	}
	// The "whitespace" tokenizer model drops the whitespace: "hi", "!".
	v.Model = "whitespace"
	if tok, err = New(v); err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(" hi \t!\n", EncodeOptions{}); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("whitespace model: got %v", got)
	}
}

// FuzzRawBPEAndRWKV: with every byte a token, Gemma 4's BPE and RWKV give back any text
// (Gemma 4's "▁" decodes as a space, so texts holding it are left out) and never panic, nor
// does unescaping any RWKV token text.
func FuzzRawBPEAndRWKV(f *testing.F) {
	for _, s := range []string{"", "a ab\n\nz", "üé\n\n\n", "\xff\xfe a", "  \n "} {
		f.Add(s)
	}
	gemma := rawBPEVocab("gemma4", "")
	rwkv := newEmptyVocab("rwkv", "", 0)
	for b := 0; b < 256; b++ {
		gemma.Tokens = append(gemma.Tokens, fmt.Sprintf("<0x%02X>", b))
		gemma.Types = append(gemma.Types, TypeByte)
		rwkv.Tokens = append(rwkv.Tokens, fmt.Sprintf("\\x%02x", b))
	}
	rwkv.Tokens = append(rwkv.Tokens, "ab", "\\n\\n", "abc")
	rwkv.Types = make([]TokenType, len(rwkv.Tokens))
	for i := range rwkv.Types {
		rwkv.Types[i] = TypeNormal
	}
	var toks []*Tokenizer
	for _, v := range []*Vocab{gemma, rwkv} {
		tok, err := New(v)
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rwkvUnescape(s) // any token text parses
		for i, tok := range toks {
			ids := tok.Encode(s, EncodeOptions{AddSpecial: true, ParseSpecial: true})
			if i == 0 && strings.Contains(s, spaceMarker) {
				continue
			}
			if back := tok.Decode(ids, false); back != s {
				t.Fatalf("%s: Decode(Encode(%q)) = %q (ids %v)", tok.Vocab().Model, s, back, ids)
			}
		}
	})
}
