package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Llama 3's special tokens follow its 128000 ordinary tokens.
const (
	llama3FirstSpecial = 128000
	llama3NumSpecial   = 256
)

// llama3SpecialName returns the text of special token 128000+i (Llama 3.1 / 3.2 naming; the
// slots left over are <|reserved_special_token_N|>, numbered in order).
func llama3SpecialName(i int) string {
	switch i {
	case 0:
		return "<|begin_of_text|>"
	case 1:
		return "<|end_of_text|>"
	case 2:
		return "<|reserved_special_token_0|>"
	case 3:
		return "<|reserved_special_token_1|>"
	case 4:
		return "<|finetune_right_pad_id|>"
	case 5:
		return "<|reserved_special_token_2|>"
	case 6:
		return "<|start_header_id|>"
	case 7:
		return "<|end_header_id|>"
	case 8:
		return "<|eom_id|>"
	case 9:
		return "<|eot_id|>"
	case 10:
		return "<|python_tag|>"
	}
	return fmt.Sprintf("<|reserved_special_token_%d|>", i-8) // 11 -> 3 ... 255 -> 247
}

// VocabFromLlama3Files builds the Llama 3 vocabulary from its GPT-2-style files: encoder.json
// (token text -> id) and vocab.bpe (one merge "a b" per line, an optional "#version" line
// first). Llama 3's 256 special tokens are added from id 128000 as control tokens; the result
// adds BOS (<|begin_of_text|>) and ends turns with <|eot_id|>.
func VocabFromLlama3Files(encoderJSONPath, vocabBPEPath string) (*Vocab, error) {
	enc, err := os.ReadFile(encoderJSONPath)
	if err != nil {
		return nil, fmt.Errorf("llama3 vocab: %w", err)
	}
	bpe, err := os.ReadFile(vocabBPEPath)
	if err != nil {
		return nil, fmt.Errorf("llama3 vocab: %w", err)
	}
	v, err := vocabFromGPT2Files(enc, bpe)
	if err != nil {
		return nil, fmt.Errorf("llama3 vocab %s: %w", encoderJSONPath, err)
	}
	if len(v.Tokens) > llama3FirstSpecial {
		return nil, fmt.Errorf("llama3 vocab %s: %d tokens, more than the %d ordinary tokens of Llama 3",
			encoderJSONPath, len(v.Tokens), llama3FirstSpecial)
	}
	for id := len(v.Tokens); id < llama3FirstSpecial; id++ { // a hole: never expected
		v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", id))
		v.Types = append(v.Types, TypeUnused)
	}
	for i := 0; i < llama3NumSpecial; i++ {
		v.Tokens = append(v.Tokens, llama3SpecialName(i))
		v.Types = append(v.Types, TypeControl)
	}
	v.Pre = "llama-bpe"
	v.BOS = llama3FirstSpecial
	v.EOS = llama3FirstSpecial + 1
	v.EOT = llama3FirstSpecial + 9
	v.EOG = []int{llama3FirstSpecial + 8} // <|eom_id|>
	v.AddBOS = true
	return v, nil
}

// vocabFromGPT2Files parses encoder.json and vocab.bpe contents into a "gpt2" vocab with
// Pre "gpt-2", no specials, and holes in the ids filled by unused "[PAD{id}]" tokens.
func vocabFromGPT2Files(encoderJSON, vocabBPE []byte) (*Vocab, error) {
	var enc map[string]int
	if err := json.Unmarshal(encoderJSON, &enc); err != nil {
		return nil, fmt.Errorf("encoder.json: %w", err)
	}
	if len(enc) == 0 {
		return nil, fmt.Errorf("encoder.json: no tokens")
	}
	maxID := -1
	for tok, id := range enc {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("encoder.json: token %q has id %d out of range", tok, id)
		}
		maxID = max(maxID, id)
	}
	if err := checkHoles(maxID+1, len(enc)); err != nil {
		return nil, fmt.Errorf("encoder.json: %w", err)
	}
	v := newEmptyVocab("gpt2", "gpt-2", maxID+1)
	for tok, id := range enc {
		if v.Types[id] != TypeUndefined {
			return nil, fmt.Errorf("encoder.json: id %d given to both %q and %q", id, v.Tokens[id], tok)
		}
		v.Tokens[id] = tok
		v.Types[id] = TypeNormal
	}
	lines := strings.Split(string(vocabBPE), "\n")
	for i, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || (i == 0 && strings.HasPrefix(line, "#version")) {
			continue
		}
		if _, _, ok := splitMerge(line); !ok {
			return nil, fmt.Errorf("vocab.bpe line %d: %q is not a merge \"a b\"", i+1, line)
		}
		v.Merges = append(v.Merges, line)
	}
	fillHoles(v)
	return v, nil
}

// newEmptyVocab returns a vocab of n tokens yet to fill (TypeUndefined) and no special tokens.
func newEmptyVocab(model, pre string, n int) *Vocab {
	return &Vocab{
		Model: model, Pre: pre,
		Tokens: make([]string, n),
		Types:  make([]TokenType, n),
		BOS:    -1, EOS: -1, UNK: -1, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1,
	}
}

// checkHoles rejects a vocab of size ids holding only defined tokens: one mostly made of
// holes is taken for a corrupt file rather than padded out.
func checkHoles(size, defined int) error {
	if holes := size - defined; holes > defined+1024 {
		return fmt.Errorf("ids run to %d but only %d tokens are defined", size-1, defined)
	}
	return nil
}

// fillHoles turns the ids that were never filled into unused "[PAD{id}]" tokens.
func fillHoles(v *Vocab) {
	for id, t := range v.Types {
		if t == TypeUndefined {
			v.Tokens[id] = fmt.Sprintf("[PAD%d]", id)
			v.Types[id] = TypeUnused
		}
	}
}
