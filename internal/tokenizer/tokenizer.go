package tokenizer

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// EncodeOptions controls Encode.
type EncodeOptions struct {
	AddSpecial   bool // add BOS/EOS as the vocab says
	ParseSpecial bool // recognise control/user-defined token texts in the input
	// MaxTokens, when positive, stops encoding as soon as the output holds more than
	// MaxTokens tokens: the result then has more than MaxTokens tokens but is not the
	// text's encoding (it is only good for saying that the text does not fit). Below the
	// limit the result is the full encoding, the same as without MaxTokens.
	MaxTokens int
}

// encoder is the model-specific part of a Tokenizer: it encodes one fragment of text that
// holds no special tokens, appending ids to out. With limit > 0 it may stop once out holds
// more than limit ids.
type encoder interface {
	encode(fragment string, out []int, limit int) []int
}

// Tokenizer encodes text to token ids and decodes ids to text for one Vocab.
// It is safe for concurrent use once built.
type Tokenizer struct {
	vocab *Vocab
	kind  string
	enc   encoder
	ids   map[string]int // token text -> id (the last id when texts repeat, as llama.cpp)

	pieces   [][]byte     // TokenBytes by id
	specials []specialTok // control, user-defined and unknown tokens, longest text first
	eog      map[int]bool // end-of-generation ids

	// rawBPE: BPE tokens are plain UTF-8 (with "▁" for spaces when escapeSpaces), not
	// GPT-2's byte alphabet.
	rawBPE, escapeSpaces bool

	// stripSpace: the decoded text's leading space is the dummy prefix (SentencePiece with
	// add_dummy_prefix) or a word-start marker (WordPiece) and is dropped.
	stripSpace bool
}

// eogTexts are token texts that end a generation whatever the vocab says, as llama.cpp does.
var eogTexts = [...]string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
}

// New builds a Tokenizer for v, dispatching on v.Model. The tokenizer keeps v; v must not be
// modified afterwards.
func New(v *Vocab) (*Tokenizer, error) {
	if v == nil {
		return nil, fmt.Errorf("tokenizer: nil vocab")
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: vocab %q has no tokens", v.Model)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return nil, fmt.Errorf("tokenizer: vocab has %d tokens but %d scores", n, len(v.Scores))
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: vocab has %d tokens but %d token types", n, len(v.Types))
	}
	for _, s := range []struct {
		name string
		id   int
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unk", v.UNK}, {"pad", v.PAD}, {"sep", v.SEP},
		{"cls", v.CLS}, {"mask", v.MASK}, {"eot", v.EOT}} {
		if s.id < -1 || s.id >= n {
			return nil, fmt.Errorf("tokenizer: %s token id %d out of range [0,%d)", s.name, s.id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return nil, fmt.Errorf("tokenizer: vocab asks to add BOS but has no BOS token")
	}
	if v.AddEOS && v.EOS < 0 {
		return nil, fmt.Errorf("tokenizer: vocab asks to add EOS but has no EOS token")
	}

	t := &Tokenizer{vocab: v}
	t.ids = make(map[string]int, n)
	for i, s := range v.Tokens {
		t.ids[s] = i
	}
	switch v.Model {
	case "llama":
		t.kind = "spm"
		t.enc = newSPM(v, t.ids)
		t.stripSpace = v.AddSpacePrefix
	case "gpt2", "gemma4", "whitespace":
		t.kind = "bpe"
		pre := v.Pre
		if v.Model == "gemma4" { // llama.cpp's name for Gemma 4's BPE, whatever the pre name
			pre = "gemma4"
		}
		m, err := newBPE(v, pre)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		t.enc = m
		t.rawBPE, t.escapeSpaces = m.raw, m.escapeSpaces
	case "bert":
		t.kind = "wordpiece"
		t.enc = newWordPiece(v, t.ids)
		t.stripSpace = true
	case "t5":
		t.kind = "unigram"
		t.enc = newUGM(v)
		t.stripSpace = v.AddSpacePrefix
	case "rwkv":
		t.kind = "rwkv"
		t.enc = newRWKV(v)
	default:
		return nil, fmt.Errorf("tokenizer: unsupported model %q", v.Model)
	}
	t.pieces = make([][]byte, n)
	for id := range n {
		t.pieces[id] = t.tokenBytes(id)
	}
	t.specials = buildSpecials(v)
	t.eog = make(map[int]bool)
	for _, id := range []int{v.EOS, v.EOT} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok {
			t.eog[id] = true
		}
	}
	for _, id := range v.EOG {
		if id >= 0 && id < n {
			t.eog[id] = true
		}
	}
	return t, nil
}

// Vocab returns the vocabulary the tokenizer was built from. It must not be modified.
func (t *Tokenizer) Vocab() *Vocab { return t.vocab }

// Kind returns "spm", "bpe", "wordpiece", "unigram" or "rwkv".
func (t *Tokenizer) Kind() string { return t.kind }

// NumTokens returns the vocabulary size.
func (t *Tokenizer) NumTokens() int { return len(t.vocab.Tokens) }

// TokenID returns the id of the token whose text is exactly s.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// IsEOG reports whether id ends a generation: EOS, EOT, the vocab's extra EOG ids, and
// well-known end-of-turn tokens such as <|im_end|> and <|eot_id|>.
func (t *Tokenizer) IsEOG(id int) bool { return t.eog[id] }

// IsSpecial reports whether id is a control or unknown token, one that Decode drops when
// asked to skip special tokens.
func (t *Tokenizer) IsSpecial(id int) bool {
	typ := t.vocab.TypeOf(id)
	return typ == TypeControl || typ == TypeUnknown
}

// TokenBytes returns the raw bytes token id stands for: byte tokens <0x0A> give 0x0A,
// SentencePiece "▁" gives " ", byte-level BPE characters map back to bytes, and control and
// user-defined tokens give their text. It returns nil for an id out of range. The result
// must not be modified.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.pieces) {
		return nil
	}
	return t.pieces[id]
}

// tokenBytes computes TokenBytes for id, following llama.cpp's token_to_piece: unused and
// undefined tokens give nothing.
func (t *Tokenizer) tokenBytes(id int) []byte {
	text := t.vocab.Tokens[id]
	switch t.vocab.TypeOf(id) {
	case TypeControl, TypeUnknown, TypeUserDefined:
		return []byte(text)
	case TypeNormal:
		switch {
		case t.kind == "bpe" && t.escapeSpaces:
			return []byte(strings.ReplaceAll(text, spaceMarker, " "))
		case t.kind == "bpe" && t.rawBPE:
			return []byte(text)
		case t.kind == "bpe":
			return byteLevelDecode(text)
		case t.kind == "rwkv":
			return rwkvUnescape(text)
		}
		return []byte(strings.ReplaceAll(text, spaceMarker, " "))
	case TypeByte:
		if b, ok := parseByteToken(text); ok {
			return []byte{b}
		}
		if t.kind == "bpe" {
			return byteLevelDecode(text)
		}
		return []byte(text)
	}
	return nil
}

// parseByteToken parses a SentencePiece byte token "<0xNN>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Encode turns text into token ids.
//
// With opt.ParseSpecial, texts of control and unknown tokens in the input become those
// tokens; texts of user-defined (added) tokens always do, as in llama.cpp and HF tokenizers.
// With opt.AddSpecial, BOS/EOS are added as the vocab asks (WordPiece: CLS ... SEP).
func (t *Tokenizer) Encode(text string, opt EncodeOptions) []int {
	out, _ := t.encode(text, opt, nil)
	return out
}

// EncodePiece tokenizes a piece of text that continues a generation, as the tokenizer
// would inside a longer text: no BOS or EOS, no SentencePiece dummy prefix, special-token
// texts not parsed (user-defined ones are, as in Encode). Jump-forward of structured output
// uses it to tokenize the bytes a grammar forces canonically.
func (t *Tokenizer) EncodePiece(piece []byte) []int {
	text := string(piece)
	if t.vocab.NFC {
		text = norm.NFC.String(text)
	}
	var out []int
	for _, f := range t.partition(text, false) {
		if f.id >= 0 {
			out = append(out, f.id)
			continue
		}
		out = t.enc.encode(normalize(t.vocab.Normalizers, f.text), out, 0)
	}
	return out
}

// EncodeContext is Encode that stops when ctx ends and returns its error. It looks at ctx
// between the fragments that special tokens cut the text into and, in byte-level BPE,
// every stopEvery pre-tokens.
func (t *Tokenizer) EncodeContext(ctx context.Context, text string, opt EncodeOptions) ([]int, error) {
	stop := func() bool { return ctx.Err() != nil }
	if stop() {
		return nil, ctx.Err()
	}
	out, stopped := t.encode(text, opt, stop)
	if stopped {
		return nil, ctx.Err()
	}
	return out, nil
}

// stopper is an encoder that can stop early: once stop reports true it returns what it has
// and true.
type stopper interface {
	encodeUntil(fragment string, out []int, limit int, stop func() bool) ([]int, bool)
}

// encode is Encode that stops early (reporting true) when stop, if not nil, says so.
func (t *Tokenizer) encode(text string, opt EncodeOptions, stop func() bool) ([]int, bool) {
	v := t.vocab
	if v.NFC {
		text = norm.NFC.String(text)
	}
	size := len(text)/3 + 2
	if opt.MaxTokens > 0 {
		size = min(size, opt.MaxTokens+2)
	}
	out := make([]int, 0, size)
	if opt.AddSpecial {
		switch {
		case t.kind == "wordpiece":
			if id := firstValid(v.CLS, v.BOS); id >= 0 {
				out = append(out, id)
			}
		case v.AddBOS:
			out = append(out, v.BOS)
		}
	}
	prevSpecial := true // SentencePiece: a dummy prefix goes before text that starts the input or follows a special token
	for _, f := range t.partition(text, opt.ParseSpecial) {
		if opt.MaxTokens > 0 && len(out) > opt.MaxTokens {
			return out, false
		}
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		frag := normalize(v.Normalizers, f.text)
		if t.kind == "spm" && v.AddSpacePrefix && prevSpecial {
			frag = " " + frag
		}
		if stop != nil && stop() {
			return out, true
		}
		if s, ok := t.enc.(stopper); ok && stop != nil {
			var stopped bool
			if out, stopped = s.encodeUntil(frag, out, opt.MaxTokens, stop); stopped {
				return out, true
			}
		} else {
			out = t.enc.encode(frag, out, opt.MaxTokens)
		}
		prevSpecial = false
	}
	if opt.AddSpecial {
		switch {
		case t.kind == "wordpiece":
			if id := firstValid(v.SEP, v.EOS); id >= 0 {
				out = append(out, id)
			}
		case v.AddEOS:
			out = append(out, v.EOS)
		}
	}
	return out, false
}

func firstValid(ids ...int) int {
	for _, id := range ids {
		if id >= 0 {
			return id
		}
	}
	return -1
}

// Decode turns ids into text. With skipSpecial, control and unknown tokens (BOS, EOS, <unk>,
// <|im_end|>, ...) are left out. Ids out of range are ignored. Invalid UTF-8 (such as a
// byte token that starts a character whose rest is missing) is kept as is.
//
// For SentencePiece vocabs that add a dummy prefix, and for WordPiece, the leading space of
// the text is dropped, as HF tokenizers' decode does.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		if id < 0 || id >= len(t.pieces) || (skipSpecial && t.IsSpecial(id)) {
			continue
		}
		b = append(b, t.pieces[id]...)
	}
	if t.stripSpace && len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return string(b)
}
