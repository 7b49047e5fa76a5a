package structured

import (
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// tokenOf returns the one token that spells s in tok, failing when s is not one token.
func tokenOf(t *testing.T, tok *tokenizer.Tokenizer, s string) int32 {
	t.Helper()
	ids := tok.EncodePiece([]byte(s))
	if len(ids) != 1 {
		t.Fatalf("%q is %d tokens %v", s, len(ids), ids)
	}
	return int32(ids[0])
}

// spell returns the bytes of tokens.
func spell(tok *tokenizer.Tokenizer, tokens []int32) string {
	var b []byte
	for _, id := range tokens {
		b = append(b, tok.TokenBytes(int(id))...)
	}
	return string(b)
}

// TestJumpForwardLlama3: on the Llama 3 vocabulary, the forced bytes are tokenized as the
// tokenizer tokenizes them, their last token left to sampling; a sampled token that merges
// with the forced bytes is replaced by the merged tokens (which the masker then accepts);
// grow caps the tokens; nothing is forced inside free text.
func TestJumpForwardLlama3(t *testing.T) {
	tok := loadLlama3(t)
	trie, err := NewTokenTrie(tok)
	if err != nil {
		t.Fatal(err)
	}
	// no merge: `{"` sampled, `name": ` forced
	k := NewTokenGrammar(mustGBNF(t, `root ::= "{\"name\": " [0-9]+ "}"`), trie, tok).NewMasker()
	if err := k.Accept([]int32{tokenOf(t, tok, `{"`)}); err != nil {
		t.Fatal(err)
	}
	replace, forced := k.JumpForward(100)
	canon := tok.EncodePiece([]byte(`{"name": `))
	if replace != 0 || spell(tok, forced) != `name":` || !slices.Equal(toInts(forced), canon[1:len(canon)-1]) {
		t.Fatalf("after {\": replace %d, forced %q %v, canonical %v", replace, spell(tok, forced), forced, canon)
	}
	if r, f := k.JumpForward(1); r != 0 || len(f) != 1 || f[0] != forced[0] {
		t.Fatalf("grow 1: replace %d, %v", r, f)
	}
	if err := k.Accept(forced); err != nil {
		t.Fatal(err)
	}

	// merge: `n` sampled, `ame": "` forced: the tokenizer spells `name` as one token
	k = NewTokenGrammar(mustGBNF(t, `root ::= "{\"" [a-z] "ame\": \"" [a-z]+ "\"}"`), trie, tok).NewMasker()
	if err := k.Accept([]int32{tokenOf(t, tok, `{"`), tokenOf(t, tok, `n`)}); err != nil {
		t.Fatal(err)
	}
	replace, forced = k.JumpForward(100)
	canon = tok.EncodePiece([]byte(`name": "`))
	if replace != 1 || !slices.Equal(toInts(forced), canon[:len(canon)-1]) || tok.TokenBytes(int(forced[0]))[0] != 'n' || len(tok.TokenBytes(int(forced[0]))) < 2 {
		t.Fatalf("after n: replace %d, forced %q %v, canonical %v", replace, spell(tok, forced), forced, canon)
	}
	k.Rollback(1)
	if err := k.Accept(forced); err != nil {
		t.Fatalf("the merged tokens: %v", err)
	}
	if r, f := k.JumpForward(100); len(f) != 0 && r != 0 {
		t.Fatalf("after the jump: replace %d, %v", r, f)
	}
	// inside free text nothing is forced
	if err := k.Accept([]int32{tokenOf(t, tok, ` "`), tokenOf(t, tok, `bob`)}); err != nil {
		t.Fatal(err)
	}
	if _, f := k.JumpForward(100); len(f) != 0 {
		t.Fatalf("inside a free string: %v", f)
	}
}

// TestJumpForwardSentencePiece: a SentencePiece vocabulary (stories260K) tokenizes the
// forced piece with no dummy prefix space; a vocabulary that cannot tokenize never jumps.
func TestJumpForwardSentencePiece(t *testing.T) {
	tok := newTokenizer(t)(format.LoadVocab(testdata.Path(t, "models/stories260K/tok512.bin"), 0))
	trie, err := NewTokenTrie(tok)
	if err != nil {
		t.Fatal(err)
	}
	k := NewTokenGrammar(mustGBNF(t, `root ::= "x" "Once upon a time there was" [a-z]+`), trie, tok).NewMasker()
	if err := k.Accept([]int32{int32(tok.EncodePiece([]byte("x"))[0])}); err != nil {
		t.Fatal(err)
	}
	replace, forced := k.JumpForward(100)
	got := spell(tok, forced)
	if replace == 0 {
		got = "x" + got
	}
	if len(forced) == 0 || len(got) < len("xOnce") || got != "xOnce upon a time there was"[:len(got)] {
		t.Fatalf("replace %d, forced %q", replace, got)
	}
	k.Rollback(replace)
	if err := k.Accept(forced); err != nil {
		t.Fatal(err)
	}

	v := smallVocab()
	strie, err := NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	sk := NewTokenGrammar(mustGBNF(t, `root ::= "abcabc"`), strie, v).NewMasker()
	if _, f := sk.JumpForward(100); f != nil {
		t.Fatalf("a vocabulary without an encoder jumped %v", f)
	}
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
