// Package tokenizer turns text into token ids and back for the vocabularies kvasir loads:
// SentencePiece-style BPE ("llama"), byte-level BPE ("gpt2") and WordPiece ("bert").
//
// Every tokenizer source (GGUF metadata, llama2.c tokenizer files, HF tokenizer.json) is first
// turned into a Vocab, which mirrors GGUF's tokenizer.ggml.* metadata; New builds a Tokenizer
// from a Vocab. This package reads no model file itself: package format reads GGUF metadata
// into a Vocab, and hands this package the llama2.c pieces and tokenizer.json bytes.
package tokenizer

// TokenType mirrors GGUF tokenizer.ggml.token_type.
type TokenType int32

// Token types, with the values GGUF stores.
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// Vocab mirrors the GGUF tokenizer.ggml.* metadata; every tokenizer source is turned into one.
type Vocab struct {
	Model  string      // "llama" (SentencePiece BPE), "gpt2" (byte-level BPE), "bert" (WordPiece), "t5" (unigram), "rwkv"; "gemma4" and "whitespace" are BPE
	Pre    string      // pre-tokenizer name for gpt2 models: "default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", ...
	Tokens []string    // token texts, indexed by id
	Scores []float32   // may be nil
	Types  []TokenType // may be nil (then all normal)
	Merges []string    // "a b" pairs, gpt2 only

	// Special token ids; -1 when absent.
	BOS, EOS, UNK, PAD, SEP, CLS, MASK, EOT int

	AddBOS, AddEOS bool
	AddSpacePrefix bool // SentencePiece "add_dummy_prefix"
	// RemoveExtraSpaces: unigram ("t5") normalization drops leading and trailing spaces and
	// merges runs of them (SentencePiece's remove_extra_whitespaces).
	RemoveExtraSpaces bool
	// CharsMap is SentencePiece's precompiled normalization map for unigram vocabs (GGUF
	// tokenizer.ggml.precompiled_charsmap); may be nil.
	CharsMap []byte
	// NFC puts text in Unicode normalization form C before it is tokenized (a Hugging
	// Face tokenizer.json's NFC normalizer, as Qwen2's has).
	NFC bool
	// Normalizers are the steps of a Hugging Face normalizer other than NFC alone, applied
	// in order to each piece of text between special tokens (byte-level BPE only).
	Normalizers []Normalizer
	// PreSteps is a Hugging Face pre-tokenizer that no tokenizer.ggml.pre name describes
	// (then Pre is empty): its steps, each splitting the pieces of the one before. GGUF
	// cannot hold it.
	PreSteps []PreStep
	// IgnoreMerges: a byte-level BPE word that is itself a token is emitted whole (a
	// tokenizer.json's ignore_merges; names such as llama-bpe imply it).
	IgnoreMerges bool

	// Strip holds lstrip/rstrip flags of added tokens by id; may be nil.
	Strip map[int]Strip
	// EOG lists further end-of-generation token ids beyond EOS, EOT and the well-known
	// end-of-turn texts (e.g. from a generation config); may be nil.
	EOG []int
}

// TypeOf returns the type of token id, TypeNormal when the vocab has no types and
// TypeUndefined for an id out of range.
func (v *Vocab) TypeOf(id int) TokenType {
	if id < 0 || id >= len(v.Tokens) {
		return TypeUndefined
	}
	if id >= len(v.Types) {
		return TypeNormal
	}
	return v.Types[id]
}

// ScoreOf returns the score of token id, or 0 when the vocab has no scores.
func (v *Vocab) ScoreOf(id int) float32 {
	if id < 0 || id >= len(v.Scores) {
		return 0
	}
	return v.Scores[id]
}

// Strip marks an added token that swallows the whitespace beside it when it is matched in the
// input (HF added tokens' lstrip/rstrip).
type Strip uint8

// Strip flags.
const (
	StripLeft  Strip = 1 << iota // drop whitespace to the left of the token
	StripRight                   // drop whitespace to the right of the token
)

// PreStep is one step of a Hugging Face pre-tokenizer (HF type and the options kvasir reads).
type PreStep struct {
	Type             string // "Split", "Digits", "ByteLevel" or "Punctuation"
	Pattern          string // Split: the regular expression (one of those kvasir implements)
	IndividualDigits bool   // Digits: every digit alone rather than runs of them
	AddPrefixSpace   bool   // ByteLevel: a space before each piece that does not start with one
	UseRegex         bool   // ByteLevel: split by GPT-2's expression
}

// Normalizer is one step of a Hugging Face normalizer.
type Normalizer struct {
	Type        string // "NFC", "NFKC", "NFD", "NFKD", "Lowercase", "Strip", "StripAccents", "Replace", "Prepend"
	Old, New    string // Replace: every Old becomes New; Prepend: New goes before non-empty text
	Left, Right bool   // Strip: which ends lose their whitespace
}
