package structured

import "bytes"

// Jump-forward (SGLang's compressed-FSM idea): where the grammar admits exactly one
// continuation, such as a fixed key and the `": "` after it, the engine appends the tokens of
// those bytes without sampling them, and computes them in one step instead of one step each.
//
// The tokens appended must be the ones the tokenizer would produce, or the model sees ids it
// never saw in training for that text. Two boundaries matter:
//
//   - the start: the last sampled token may merge with the forced bytes (a sampled `"` and
//     a forced `name` are one token `"name` in many vocabularies). The bytes of the last
//     token and the forced bytes are tokenized together, and when the first token differs
//     from the sampled one, the sampled token is replaced (never cut: the tokens must cover
//     its bytes, or nothing is jumped, since the sampled text is the model's choice);
//   - the end: the last token of the forced run may merge with the bytes the model writes
//     next (forced `": "` and a sampled `John` may be one token ` "John` ... or `":"`
//     followed by more), so it is left to sampling, where the mask allows any token that
//     begins with its bytes.
//
// So a forced run of one token jumps nothing; a run of m tokens saves m-1 forward passes.

// maxForcedBytes bounds the bytes one jump looks ahead.
const maxForcedBytes = 512

// PieceEncoder is a Vocabulary that can also tokenize a piece of text in the middle of an
// output (tokenizer.Tokenizer's EncodePiece): jump-forward needs it; a Masker over a
// vocabulary without it never jumps.
type PieceEncoder interface {
	EncodePiece(piece []byte) []int
}

// JumpForward returns the tokens the grammar forces after the output so far, tokenized
// canonically (see above), at most grow more tokens than the output holds now: replace is 1
// when they replace the last accepted token (whose bytes they begin with), else 0. It
// returns no tokens when nothing is forced, the vocabulary cannot tokenize, or the
// tokenization does not spell the bytes exactly. It implements sample.Forcer; the masker is
// not changed.
func (k *Masker) JumpForward(grow int) (replace int, tokens []int32) {
	enc, ok := k.vocab.(PieceEncoder)
	if !ok || k.ended > 0 || grow <= 0 {
		return 0, nil
	}
	forced := k.m.Forced(maxForcedBytes)
	if len(forced) == 0 {
		return 0, nil
	}
	var lastBytes []byte
	if k.last >= 0 && len(k.lens) > 0 {
		lastBytes = k.m.input[len(k.m.input)-k.lens[len(k.lens)-1]:]
	}
	piece := append(append([]byte(nil), lastBytes...), forced...)
	ids := enc.EncodePiece(piece)
	// The tokens must spell the piece exactly, with ordinary tokens only.
	var spelled []byte
	for _, id := range ids {
		if id < 0 || id >= k.trie.numTokens || k.vocab.IsSpecial(id) || k.vocab.IsEOG(id) {
			return 0, nil
		}
		spelled = append(spelled, k.vocab.TokenBytes(id)...)
	}
	if !bytes.Equal(spelled, piece) || len(ids) < 2 {
		return 0, nil
	}
	ids = ids[:len(ids)-1] // the end boundary: the last token is left to sampling
	if len(lastBytes) > 0 && int32(ids[0]) == k.last {
		ids = ids[1:] // the sampled token stays
		lastBytes = nil
	} else if len(lastBytes) > 0 {
		replace = 1
	}
	ids = ids[:min(len(ids), grow+replace)]
	// A replacement must cover the sampled token's bytes.
	covered := 0
	for _, id := range ids {
		covered += len(k.vocab.TokenBytes(id))
	}
	if len(ids) == 0 || covered <= len(lastBytes) {
		return 0, nil
	}
	tokens = make([]int32, len(ids))
	for i, id := range ids {
		tokens[i] = int32(id)
	}
	return replace, tokens
}
