package tokenizer

import (
	"slices"
	"testing"
)

func TestWordPieceVectorsBertBGE(t *testing.T) {
	tok := runVocabVectors(t, "ggml-vocab-bert-bge.gguf")
	if tok.Kind() != "wordpiece" {
		t.Fatalf("kind %q", tok.Kind())
	}
}

func TestWordPieceWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello, World!", []string{"hello", ",", "world", "!"}},
		{"Äpfel café", []string{"apfel", "cafe"}},
		{"a\u200db\x00c\tD", []string{"abc", "d"}}, // format and control characters dropped
		{"日本語x", []string{"日", "本", "語", "x"}},
		{"1+1=2 $5", []string{"1", "+", "1", "=", "2", "$", "5"}},
		{"€uro", []string{"€uro"}}, // non-ASCII symbols stay inside words
	}
	for _, tc := range tests {
		got := slices.Collect(wordPieceWords(tc.in))
		if !equalStrings(got, tc.want) {
			t.Errorf("wordPieceWords(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
