package format

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// GGUF metadata keys of the tokenizer (the "seperator" spelling is GGUF's own).
const (
	keyModel       = "tokenizer.ggml.model"
	keyPre         = "tokenizer.ggml.pre"
	keyTokens      = "tokenizer.ggml.tokens"
	keyScores      = "tokenizer.ggml.scores"
	keyTokenType   = "tokenizer.ggml.token_type"
	keyMerges      = "tokenizer.ggml.merges"
	keyBOS         = "tokenizer.ggml.bos_token_id"
	keyEOS         = "tokenizer.ggml.eos_token_id"
	keyUNK         = "tokenizer.ggml.unknown_token_id"
	keyPAD         = "tokenizer.ggml.padding_token_id"
	keySEP         = "tokenizer.ggml.seperator_token_id"
	keyCLS         = "tokenizer.ggml.cls_token_id"
	keyMASK        = "tokenizer.ggml.mask_token_id"
	keyEOT         = "tokenizer.ggml.eot_token_id"
	keyEOM         = "tokenizer.ggml.eom_token_id"
	keyAddBOS      = "tokenizer.ggml.add_bos_token"
	keyAddEOS      = "tokenizer.ggml.add_eos_token"
	keyAddPrefix   = "tokenizer.ggml.add_space_prefix"
	keyRemoveWS    = "tokenizer.ggml.remove_extra_whitespaces"
	keyCharsMap    = "tokenizer.ggml.precompiled_charsmap"
	keyGeneralName = "general.name"
)

// ggufMeta is the part of a GGUF file that vocabFromGGUF reads (*gguf.File).
type ggufMeta interface {
	Get(key string) (gguf.Value, bool)
}

// vocabFromGGUF reads the tokenizer.ggml.* metadata of a GGUF file into a Vocab, applying the
// defaults llama.cpp applies per tokenizer model (for "llama": BOS 1, EOS 2, UNK 0, add BOS,
// add a dummy prefix; for "bert": CLS/BOS 101, UNK 100, SEP 102, PAD 0, MASK 103). Special
// token ids out of range (such as 0xFFFFFFFF for "none") leave the default in place.
func vocabFromGGUF(m ggufMeta) (*tokenizer.Vocab, error) {
	getString := func(key string) (string, bool) {
		if v, ok := m.Get(key); ok {
			return v.String()
		}
		return "", false
	}
	model, ok := getString(keyModel)
	if !ok {
		return nil, fmt.Errorf("gguf tokenizer: missing %s", keyModel)
	}
	pre, _ := getString(keyPre)
	v := &tokenizer.Vocab{Model: model, Pre: pre, BOS: -1, EOS: -1, UNK: -1, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1}

	tv, ok := m.Get(keyTokens)
	if !ok {
		return nil, fmt.Errorf("gguf tokenizer: missing %s", keyTokens)
	}
	tokens, ok := tv.Strings()
	if !ok {
		return nil, fmt.Errorf("gguf tokenizer: %s is %v, not an array of strings", keyTokens, tv.Type)
	}
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("gguf tokenizer: %s is empty", keyTokens)
	}
	v.Tokens = make([]string, n)
	for i, s := range tokens {
		if s == "" { // as llama.cpp: give empty tokens a unique text
			s = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		v.Tokens[i] = s
	}
	if sv, ok := m.Get(keyScores); ok {
		scores, ok := sv.Float32s()
		if !ok || len(scores) != n {
			return nil, fmt.Errorf("gguf tokenizer: %s: want %d floats, have %v of %d", keyScores, n, sv.Type, sv.Len())
		}
		v.Scores = scores
	}
	if tv, ok := m.Get(keyTokenType); ok {
		types, ok := tv.Int32s()
		if !ok || len(types) != n {
			return nil, fmt.Errorf("gguf tokenizer: %s: want %d integers, have %v of %d", keyTokenType, n, tv.Type, tv.Len())
		}
		v.Types = make([]tokenizer.TokenType, n)
		for i, t := range types {
			v.Types[i] = tokenizer.TokenType(t)
			if t < int32(tokenizer.TypeUndefined) || t > int32(tokenizer.TypeByte) {
				v.Types[i] = tokenizer.TypeUndefined
			}
		}
	}
	if mv, ok := m.Get(keyMerges); ok {
		merges, ok := mv.Strings()
		if !ok {
			return nil, fmt.Errorf("gguf tokenizer: %s is %v, not an array of strings", keyMerges, mv.Type)
		}
		v.Merges = merges
	}

	switch model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case "bert":
		v.BOS, v.CLS, v.UNK, v.SEP, v.PAD, v.MASK = 101, 101, 100, 102, 0, 103
		v.AddBOS = true
	case "gpt2":
		v.BOS, v.EOS = 11, 11
		switch pre {
		case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
			"jina-v5-nano", "tekken", "chameleon":
			v.AddBOS = true
		case "glm4", "chatglm-bpe":
			v.BOS = -1
		}
	case "t5":
		v.EOS, v.UNK, v.PAD = 1, 2, 0
		v.AddEOS = true
		if cv, ok := m.Get(keyCharsMap); ok {
			switch b := cv.Any().(type) {
			case []uint8:
				v.CharsMap = b
			case []int8:
				v.CharsMap = make([]byte, len(b))
				for i, c := range b {
					v.CharsMap[i] = byte(c)
				}
			default:
				return nil, fmt.Errorf("gguf tokenizer: %s is %v, not an array of bytes", keyCharsMap, cv.Type)
			}
		}
	case "rwkv", "gemma4", "whitespace": // no default special tokens
	default:
		return nil, fmt.Errorf("gguf tokenizer: unsupported tokenizer model %q", model)
	}
	for _, s := range []struct {
		key string
		id  *int
	}{{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyUNK, &v.UNK}, {keyPAD, &v.PAD}, {keySEP, &v.SEP},
		{keyCLS, &v.CLS}, {keyMASK, &v.MASK}, {keyEOT, &v.EOT}} {
		if id, ok := tokenID(m, s.key, n); ok {
			*s.id = id
		}
	}
	if _, hasBOS := m.Get(keyBOS); !hasBOS && model == "bert" {
		v.BOS = v.CLS
	}
	if id, ok := tokenID(m, keyEOM, n); ok {
		v.EOG = append(v.EOG, id)
	}
	for _, s := range []struct {
		key string
		b   *bool
	}{{keyAddBOS, &v.AddBOS}, {keyAddEOS, &v.AddEOS}, {keyAddPrefix, &v.AddSpacePrefix}, {keyRemoveWS, &v.RemoveExtraSpaces}} {
		if bv, ok := m.Get(s.key); ok {
			if b, ok := bv.Bool(); ok {
				*s.b = b
			}
		}
	}
	if model == "gemma4" || pre == "gemma4" {
		v.AddBOS = true // as llama.cpp, which overrides Gemma 4 files that say otherwise
	}
	// Defaults that point past a small vocab (gpt2's 11) mean "absent".
	for _, id := range []*int{&v.BOS, &v.EOS, &v.UNK, &v.PAD, &v.SEP, &v.CLS, &v.MASK} {
		if *id >= n {
			*id = -1
		}
	}
	if v.BOS < 0 {
		v.AddBOS = false
	}
	if v.EOS < 0 {
		v.AddEOS = false
	}
	name, _ := getString(keyGeneralName)
	applyStripRules(v, strings.ToLower(name))
	return v, nil
}

// tokenID reads a special token id stored under key, accepting it only within [0,n).
func tokenID(m ggufMeta, key string, n int) (int, bool) {
	val, ok := m.Get(key)
	if !ok {
		return 0, false
	}
	id, ok := val.Int64()
	if !ok || id < 0 || id >= int64(n) {
		return 0, false
	}
	return int(id), true
}

// applyStripRules sets the lstrip/rstrip flags llama.cpp sets by model and tokenizer name,
// since GGUF does not store them: Phi-3's special tokens swallow the whitespace after them
// (except <unk>, <s> and <|endoftext|>), and jina-v2's <mask> the whitespace before it.
func applyStripRules(v *tokenizer.Vocab, name string) {
	set := func(id int, s tokenizer.Strip) {
		if v.Strip == nil {
			v.Strip = make(map[int]tokenizer.Strip)
		}
		v.Strip[id] |= s
	}
	switch {
	case strings.Contains(v.Pre, "jina-v2-de") || strings.Contains(v.Pre, "jina-v2-es") || strings.Contains(v.Pre, "jina-v2-code"):
		for id, t := range v.Tokens {
			if t == "<mask>" {
				set(id, tokenizer.StripLeft)
			}
		}
	case strings.Contains(name, "phi-3") || strings.Contains(name, "phi3"):
		for id, t := range v.Tokens {
			typ := v.TypeOf(id)
			special := typ == tokenizer.TypeControl || typ == tokenizer.TypeUserDefined || typ == tokenizer.TypeUnknown
			switch {
			case t == "<unk>" || t == "<s>" || t == "<|endoftext|>":
			case special || t == "</s>":
				set(id, tokenizer.StripRight)
			}
		}
	}
}

// vocabFitsGGUF reports an error for a vocab that GGUF's tokenizer.ggml.* keys cannot hold:
// a tokenizer.json pre-tokenizer or normalizer that no tokenizer.ggml.pre name describes.
func vocabFitsGGUF(v *tokenizer.Vocab) error {
	if v != nil && (len(v.PreSteps) > 0 || len(v.Normalizers) > 0) {
		return fmt.Errorf("gguf: the tokenizer's pre-tokenizer %v and normalizer %v have no tokenizer.ggml.pre name, so GGUF cannot hold them", v.PreSteps, v.Normalizers)
	}
	return nil
}

// vocabMetadata returns the tokenizer.ggml.* metadata that describes v, for GGUF writers.
// Absent special tokens (-1) are left out.
func vocabMetadata(v *tokenizer.Vocab) []gguf.KV {
	kvs := []gguf.KV{{Key: keyModel, Value: gguf.String(v.Model)}}
	if v.Pre != "" {
		kvs = append(kvs, gguf.KV{Key: keyPre, Value: gguf.String(v.Pre)})
	}
	kvs = append(kvs, gguf.KV{Key: keyTokens, Value: gguf.Strings(v.Tokens)})
	if v.Scores != nil {
		kvs = append(kvs, gguf.KV{Key: keyScores, Value: gguf.Float32s(v.Scores)})
	}
	if v.Types != nil {
		types := make([]int32, len(v.Types))
		for i, t := range v.Types {
			types[i] = int32(t)
		}
		kvs = append(kvs, gguf.KV{Key: keyTokenType, Value: gguf.Int32s(types)})
	}
	if v.Merges != nil {
		kvs = append(kvs, gguf.KV{Key: keyMerges, Value: gguf.Strings(v.Merges)})
	}
	for _, s := range []struct {
		key string
		id  int
	}{{keyBOS, v.BOS}, {keyEOS, v.EOS}, {keyUNK, v.UNK}, {keyPAD, v.PAD}, {keySEP, v.SEP},
		{keyCLS, v.CLS}, {keyMASK, v.MASK}, {keyEOT, v.EOT}} {
		if s.id >= 0 {
			kvs = append(kvs, gguf.KV{Key: s.key, Value: gguf.Uint32(uint32(s.id))})
		}
	}
	kvs = append(kvs,
		gguf.KV{Key: keyAddBOS, Value: gguf.Bool(v.AddBOS)},
		gguf.KV{Key: keyAddEOS, Value: gguf.Bool(v.AddEOS)},
		gguf.KV{Key: keyAddPrefix, Value: gguf.Bool(v.AddSpacePrefix)},
	)
	if v.RemoveExtraSpaces {
		kvs = append(kvs, gguf.KV{Key: keyRemoveWS, Value: gguf.Bool(true)})
	}
	if v.CharsMap != nil {
		kvs = append(kvs, gguf.KV{Key: keyCharsMap, Value: gguf.Uint8s(v.CharsMap)})
	}
	return kvs
}
