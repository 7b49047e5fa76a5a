package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamDecode feeds ids to a Detokenizer and checks that it only ever holds back the start
// of one character that later bytes could still complete.
func streamDecode(t *testing.T, tok *Tokenizer, ids []int, skip bool) string {
	t.Helper()
	d := NewDetokenizer(tok, skip)
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(d.Add(id))
		if p := d.pending; len(p) > 0 && (len(p) >= utf8.UTFMax || completeLen(p) != 0) {
			t.Fatalf("after Add(%d) holding back %q, not an incomplete character", id, p)
		}
	}
	sb.WriteString(d.Flush())
	if d.Pending() != 0 {
		t.Fatalf("Pending after Flush = %d", d.Pending())
	}
	return sb.String()
}

func TestDetokenizerRandomIDs(t *testing.T) {
	_, small := loadTok512(t)
	llama := loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	r := rand.New(rand.NewPCG(1, 2))
	for _, tok := range []*Tokenizer{small, llama} {
		n := tok.NumTokens()
		for iter := range 300 {
			ids := make([]int, r.IntN(40))
			for i := range ids {
				switch r.IntN(4) {
				case 0: // byte tokens, often splitting multi-byte characters
					ids[i] = 3 + 0x80 + r.IntN(0x78)
				case 1:
					ids[i] = r.IntN(3) // <unk>, <s>, </s>
				default:
					ids[i] = r.IntN(n+2) - 1 // includes out-of-range ids
				}
			}
			for _, skip := range []bool{false, true} {
				got := streamDecode(t, tok, ids, skip)
				if want := tok.Decode(ids, skip); got != want {
					t.Fatalf("iter %d skip %v ids %v:\nstream %q\ndecode %q", iter, skip, ids, got, want)
				}
			}
		}
	}
}

// TestDetokenizerByteFallback: text whose characters are encoded as byte tokens streams out
// as whole characters only.
func TestDetokenizerByteFallback(t *testing.T) {
	_, tok := loadTok512(t)
	text := "Tom saw 🐶 and 日本語 — naïve café ✓."
	ids := tok.Encode(text, EncodeOptions{AddSpecial: true})
	nBytes := 0
	for _, id := range ids {
		if tok.Vocab().TypeOf(id) == TypeByte {
			nBytes++
		}
	}
	if nBytes < 10 {
		t.Fatalf("expected many byte tokens, got %d in %v", nBytes, ids)
	}
	d := NewDetokenizer(tok, true)
	var sb strings.Builder
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			t.Fatalf("Add(%d) = %q is not valid UTF-8", id, s)
		}
		sb.WriteString(s)
	}
	if rest := d.Flush(); rest != "" {
		t.Fatalf("Flush = %q, want nothing held back", rest)
	}
	if sb.String() != text {
		t.Fatalf("streamed %q, want %q", sb.String(), text)
	}
}

func TestDetokenizerLeadingSpace(t *testing.T) {
	tok := loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	ids := tok.Encode("Hello world", EncodeOptions{AddSpecial: true}) // <s> ▁Hello ▁world
	d := NewDetokenizer(tok, true)
	var parts []string
	for _, id := range ids {
		parts = append(parts, d.Add(id))
	}
	if want := []string{"", "Hello", " world"}; !equalStrings(parts, want) {
		t.Fatalf("parts %q, want %q", parts, want)
	}
	d = NewDetokenizer(tok, false)
	if s := d.Add(ids[0]) + d.Add(ids[1]); s != "<s> Hello" {
		t.Fatalf("with specials: %q", s)
	}
}

func equalStrings(a, b []string) bool {
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

func TestCompleteLen(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 3}, {"a\xe6", 1}, {"a\xe6\x97", 1}, {"a\xe6\x97\xa5", 4},
		{"\xf0\x9f\x90", 0}, {"\xf0\x9f\x90\xb6", 4}, {"a\x80", 2}, {"a\xe6z", 3},
		{"\xff", 1}, {"\xe6\x97\xa5\x80\x80", 5},
	}
	for _, tc := range tests {
		if got := completeLen([]byte(tc.in)); got != tc.want {
			t.Errorf("completeLen(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
