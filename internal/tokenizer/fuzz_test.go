package tokenizer

import (
	"testing"
	"unicode/utf8"
)

var fuzzTexts = []string{
	"", " ", "Hello world", "  two  spaces\n\nnewlines\t", "日本語 🙂 naïve", "\xff\xfe\x80 invalid",
	"<s>special</s><unk>", "\xe6\x97", "a\x00b",
}

// FuzzEncodeSPM: SentencePiece encoding never panics, gives ids in range, and decodes back
// to the input (the dummy prefix is dropped again).
func FuzzEncodeSPM(f *testing.F) {
	for _, s := range fuzzTexts {
		f.Add(s)
	}
	llama := loadGGUFTokenizer(f, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	small := loadGGUFTokenizer(f, "models/stories260K/stories260K.gguf")
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range []*Tokenizer{llama, small} {
			ids := tok.Encode(s, EncodeOptions{AddSpecial: true})
			for _, id := range ids {
				if id < 0 || id >= tok.NumTokens() {
					t.Fatalf("id %d out of range", id)
				}
			}
			if got := tok.Decode(ids, true); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
			tok.Encode(s, EncodeOptions{AddSpecial: true, ParseSpecial: true})
		}
	})
}

// FuzzEncodeWordPiece: WordPiece encoding never panics and gives ids in range.
func FuzzEncodeWordPiece(f *testing.F) {
	for _, s := range fuzzTexts {
		f.Add(s)
	}
	tok := loadGGUFTokenizer(f, "tokenizers/vocab/ggml-vocab-bert-bge.gguf")
	f.Fuzz(func(t *testing.T, s string) {
		for _, id := range tok.Encode(s, EncodeOptions{AddSpecial: true, ParseSpecial: true}) {
			if id < 0 || id >= tok.NumTokens() {
				t.Fatalf("id %d out of range", id)
			}
		}
	})
}

// FuzzDetokenizer: streaming any id sequence gives Decode's text, holding back only the start
// of a character, and text made of whole characters streams as valid UTF-8 pieces.
func FuzzDetokenizer(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 200, 0, 0xe6 + 3, 0, 0x97 + 3, 0, 0xa5 + 3}, false)
	f.Add([]byte{1, 10, 255, 255, 0, 3}, true)
	tok := loadGGUFTokenizer(f, "models/stories260K/stories260K.gguf")
	f.Fuzz(func(t *testing.T, raw []byte, skip bool) {
		var ids []int
		for i := 0; i+1 < len(raw); i += 2 {
			ids = append(ids, (int(raw[i])<<8|int(raw[i+1]))%(tok.NumTokens()+2)-1)
		}
		d := NewDetokenizer(tok, skip)
		var out []byte
		for _, id := range ids {
			out = append(out, d.Add(id)...)
			if p := d.pending; len(p) > 0 && (len(p) >= utf8.UTFMax || completeLen(p) != 0) {
				t.Fatalf("holding back %q", p)
			}
		}
		out = append(out, d.Flush()...)
		if want := tok.Decode(ids, skip); string(out) != want {
			t.Fatalf("stream %q, decode %q", out, want)
		}
	})
}
