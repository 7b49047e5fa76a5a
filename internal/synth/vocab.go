package synth

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// ByteVocab returns a SentencePiece-style vocabulary of the given size for models that come
// with no tokenizer: <unk>, <s>, </s>, the 256 byte-fallback tokens, then single characters and made-up
// syllable words ("ka", "▁ka", ...) so that any text can be encoded and any generated id decodes to text.
// It fails when size is too small to hold the byte tokens.
func ByteVocab(size int) (*tokenizer.Vocab, error) {
	const fixed = 3 + 256
	if size < fixed {
		return nil, fmt.Errorf("a byte-fallback vocabulary needs at least %d tokens, the model has %d", fixed, size)
	}
	v := &tokenizer.Vocab{
		Model: "llama", Pre: "default",
		Tokens: make([]string, 0, size), Scores: make([]float32, 0, size), Types: make([]tokenizer.TokenType, 0, size),
		BOS: 1, EOS: 2, UNK: 0, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1,
		AddBOS: true, AddSpacePrefix: true,
	}
	add := func(text string, typ tokenizer.TokenType, score float32) {
		v.Tokens = append(v.Tokens, text)
		v.Types = append(v.Types, typ)
		v.Scores = append(v.Scores, score)
	}
	add("<unk>", tokenizer.TypeUnknown, 0)
	add("<s>", tokenizer.TypeControl, 0)
	add("</s>", tokenizer.TypeControl, 0)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), tokenizer.TypeByte, 0)
	}
	// Single characters first, so that every made-up word below is reachable by merges.
	for _, r := range "▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()" {
		if len(v.Tokens) < size {
			add(string(r), tokenizer.TypeNormal, -1e6)
		}
	}
	const consonants, vowels = "bdfgklmnprstvz", "aeiou"
	base := len(consonants) * len(vowels)
	for i := 0; len(v.Tokens) < size; i++ {
		// Syllable words of growing length, each also as a word start ("▁" + word).
		word := ""
		for n := i; ; n /= base {
			k := n % base
			word += string(consonants[k/len(vowels)]) + string(vowels[k%len(vowels)])
			if n < base {
				break
			}
		}
		add(word, tokenizer.TypeNormal, -float32(i))
		if len(v.Tokens) < size {
			add("▁"+word, tokenizer.TypeNormal, -float32(i))
		}
	}
	return v, nil
}
