package encoder

import "github.com/kvasir-llm/kvasir/internal/tokenizer"

// Tokenize turns text into one encoder input: [CLS] text [SEP] (the vocabulary's CLS and
// SEP, else its BOS and EOS), as BERT's tokenizers frame a single text.
func Tokenize(tok *tokenizer.Tokenizer, text string) []int32 {
	return int32s(tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true}))
}

// TokenizePair turns two texts into one cross-encoder input, [CLS] a [SEP] b [SEP], with
// each token's segment: 0 for [CLS] a [SEP], 1 for b [SEP] (BERT's token_type_ids).
func TokenizePair(tok *tokenizer.Tokenizer, v *tokenizer.Vocab, a, b string) (tokens, types []int32) {
	ta := Tokenize(tok, a)
	tb := int32s(tok.Encode(b, tokenizer.EncodeOptions{}))
	if sep := v.SEP; sep >= 0 {
		tb = append(tb, int32(sep))
	} else if v.EOS >= 0 {
		tb = append(tb, int32(v.EOS))
	}
	types = make([]int32, len(ta)+len(tb))
	for i := len(ta); i < len(types); i++ {
		types[i] = 1
	}
	return append(ta, tb...), types
}

func int32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
