package tokenizer

import (
	"strconv"
	"strings"
)

// VocabFromLlama2c builds a Vocab from a llama2.c tokenizer file's pieces and scores (such as
// tok512.bin). llama2.c stores SentencePiece pieces with "▁" turned into " ", byte tokens as
// "<0xNN>" at ids 3..258 and BOS/EOS as "\n<s>\n"/"\n</s>\n"; the Vocab gets back the
// SentencePiece texts, so it tokenizes like the .model and like run.c: score-greedy merges, a
// dummy space prefix, byte fallback, BOS 1, EOS 2, UNK 0.
func VocabFromLlama2c(pieces []string, scores []float32) *Vocab {
	n := len(pieces)
	v := &Vocab{
		Model:  "llama",
		Pre:    "default",
		Tokens: make([]string, n),
		Types:  make([]TokenType, n),
		BOS:    -1, EOS: -1, UNK: -1, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1,
		AddBOS:         true,
		AddSpacePrefix: true,
	}
	if len(scores) == n {
		v.Scores = append([]float32(nil), scores...)
	}
	for id, p := range pieces {
		typ := TypeNormal
		text := strings.ReplaceAll(p, " ", spaceMarker)
		switch {
		case id == 0 && strings.TrimSpace(p) == "<unk>":
			typ, text, v.UNK = TypeUnknown, "<unk>", id
		case id == 1 && strings.TrimSpace(p) == "<s>":
			typ, text, v.BOS = TypeControl, "<s>", id
		case id == 2 && strings.TrimSpace(p) == "</s>":
			typ, text, v.EOS = TypeControl, "</s>", id
		default:
			if _, ok := parseByteToken(p); ok {
				typ = TypeByte
			}
		}
		if text == "" {
			text = "[EMPTY_" + strconv.Itoa(id) + "]"
		}
		v.Tokens[id] = text
		v.Types[id] = typ
	}
	if v.BOS < 0 {
		v.AddBOS = false
	}
	return v
}
