package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// hfTokenizer is the part of a Hugging Face tokenizer.json that kvasir reads.
type hfTokenizer struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         hfModel         `json:"model"`
}

type hfAddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
	LStrip  bool   `json:"lstrip"`
	RStrip  bool   `json:"rstrip"`
}

type hfModel struct {
	Type         string          `json:"type"`
	Vocab        json.RawMessage `json:"vocab"`
	Merges       json.RawMessage `json:"merges"`
	UnkToken     *string         `json:"unk_token"`
	UnkID        *int            `json:"unk_id"`
	ByteFallback bool            `json:"byte_fallback"`
	IgnoreMerges bool            `json:"ignore_merges"`
}

// hfComponent is any normalizer, pre-tokenizer, post-processor or decoder: the fields of the
// kinds kvasir inspects.
type hfComponent struct {
	Type           string            `json:"type"`
	Pattern        hfPattern         `json:"pattern"`
	Content        string            `json:"content"`
	Prepend        string            `json:"prepend"`
	Replacement    string            `json:"replacement"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	PrependScheme  string            `json:"prepend_scheme"`
	UseRegex       *bool             `json:"use_regex"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	Individual     bool              `json:"individual_digits"`
	StripLeft      bool              `json:"strip_left"`
	StripRight     bool              `json:"strip_right"`
	CharsMap       []byte            `json:"precompiled_charsmap"`
	Children       []json.RawMessage `json:"pretokenizers"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Processors     []json.RawMessage `json:"processors"`
	Single         []hfTemplatePiece `json:"single"`
	CLS            []any             `json:"cls"`
	SEP            []any             `json:"sep"`
}

type hfPattern struct {
	Regex  string `json:"Regex"`
	String string `json:"String"`
}

type hfTemplatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
}

// hfConfig is the part of tokenizer_config.json that kvasir reads.
type hfConfig struct {
	BOS         hfTokenRef `json:"bos_token"`
	EOS         hfTokenRef `json:"eos_token"`
	UNK         hfTokenRef `json:"unk_token"`
	PAD         hfTokenRef `json:"pad_token"`
	SEP         hfTokenRef `json:"sep_token"`
	CLS         hfTokenRef `json:"cls_token"`
	MASK        hfTokenRef `json:"mask_token"`
	AddBOSToken *bool      `json:"add_bos_token"`
	AddEOSToken *bool      `json:"add_eos_token"`
}

// hfTokenRef is a token named in tokenizer_config.json: a string, {"content": ...} or null.
type hfTokenRef struct {
	Content string
	Set     bool
}

// UnmarshalJSON accepts a string, an object with "content", or null.
func (r *hfTokenRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*r = hfTokenRef{}
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &r.Content); err != nil {
			return err
		}
		r.Set = true
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("token is neither a string nor {\"content\": ...}: %w", err)
	}
	*r = hfTokenRef{Content: obj.Content, Set: true}
	return nil
}

// Known pre-tokenizer expressions of byte-level BPE tokenizer.json files.
const (
	hfRegexGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	hfRegexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfRegexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// hfDeepSeekLLMRegexes is DeepSeek LLM's sequence of Split expressions (letter class written
// with escapes where its characters have canonical decompositions).
var hfDeepSeekLLMRegexes = []string{
	"[\r\n]",
	"\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝ" +
		"\u1F5F-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌ\u1FD0-\u1FD3\u1FD6-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳ" +
		"Ꙁ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
	"\\s?[!-/:-~！-／：-～‘-‟　-。]+",
	"\\s+$",
	"[一-龥ࠀ-一가-퟿]+",
	"\\p{N}+",
}

// VocabFromHF builds a Vocab from a Hugging Face tokenizer.json and, when not nil, the
// tokenizer_config.json beside it (which names BOS/EOS and whether BOS is added).
//
// Supported models:
//   - byte-level BPE (model.type "BPE" with a ByteLevel pre-tokenizer): Model "gpt2", with
//     Pre the tokenizer.ggml.pre name of the pre-tokenizer's split ("gpt-2", "llama-bpe",
//     "qwen2", "gpt-4o", ...) or, when no name describes it, PreSteps (an expression kvasir
//     does not implement is an error); its normalizer becomes NFC or Normalizers;
//   - SentencePiece-style BPE (byte_fallback, "▁" for spaces, as Llama 2 and Mistral): Model
//     "llama" with Scores = -merge rank, so that SentencePiece's highest-score-first merging
//     follows the merge order;
//   - Unigram (T5): Model "t5";
//   - WordPiece: Model "bert".
//
// Merges may be "a b" strings or ["a", "b"] pairs. Added tokens become control tokens when
// special, user-defined otherwise. Ids missing between 0 and the largest id become unused
// "[PAD{id}]" tokens.
func VocabFromHF(tokenizerJSON, tokenizerConfigJSON []byte) (*Vocab, error) {
	var hf hfTokenizer
	if err := json.Unmarshal(tokenizerJSON, &hf); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var cfg hfConfig
	if len(tokenizerConfigJSON) > 0 {
		if err := json.Unmarshal(tokenizerConfigJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	var vocab map[string]int
	if hf.Model.Type != "Unigram" {
		if err := json.Unmarshal(hf.Model.Vocab, &vocab); err != nil {
			return nil, fmt.Errorf("tokenizer.json: model %q: vocab is not a map of token to id: %w", hf.Model.Type, err)
		}
		if len(vocab) == 0 {
			return nil, fmt.Errorf("tokenizer.json: model %q has an empty vocab", hf.Model.Type)
		}
	}

	var v *Vocab
	var err error
	switch hf.Model.Type {
	case "Unigram":
		v, err = hfUnigramVocab(&hf)
	case "BPE", "":
		if isSentencePieceStyle(&hf) {
			v, err = hfSentencePieceVocab(&hf, vocab)
		} else {
			v, err = hfByteLevelVocab(&hf, vocab)
		}
	case "WordPiece":
		v, err = hfWordPieceVocab(&hf, vocab)
	default:
		return nil, fmt.Errorf("tokenizer.json: model type %q is not supported (BPE, WordPiece and Unigram are)", hf.Model.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if err := hfSpecials(v, &hf, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	norm, err := components(hf.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: normalizer: %w", err)
	}
	switch v.Model {
	case "t5":
		return v, nil // read by hfUnigramVocab
	case "llama", "bert":
		for _, c := range norm {
			v.NFC = v.NFC || c.Type == "NFC"
		}
		return v, nil
	}
	if v.Normalizers, err = hfNormalizers(norm); err != nil {
		return nil, fmt.Errorf("tokenizer.json: normalizer: %w", err)
	}
	if len(v.Normalizers) == 1 && v.Normalizers[0].Type == "NFC" {
		v.NFC, v.Normalizers = true, nil
	}
	return v, nil
}

// hfBaseVocab lays out the vocab and added tokens by id (added tokens override the vocab's
// entry for their id) and fills the holes.
func hfBaseVocab(model string, hf *hfTokenizer, vocab map[string]int) (*Vocab, error) {
	maxID := -1
	for tok, id := range vocab {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("token %q has id %d out of range", tok, id)
		}
		maxID = max(maxID, id)
	}
	for _, a := range hf.AddedTokens {
		if a.ID < 0 || a.ID > 1<<24 {
			return nil, fmt.Errorf("added token %q has id %d out of range", a.Content, a.ID)
		}
		maxID = max(maxID, a.ID)
	}
	if err := checkHoles(maxID+1, len(vocab)+len(hf.AddedTokens)); err != nil {
		return nil, err
	}
	v := newEmptyVocab(model, "", maxID+1)
	for tok, id := range vocab {
		if v.Types[id] != TypeUndefined {
			return nil, fmt.Errorf("id %d given to both %q and %q", id, v.Tokens[id], tok)
		}
		v.Tokens[id] = tok
		v.Types[id] = TypeNormal
	}
	for _, a := range hf.AddedTokens {
		v.Tokens[a.ID] = a.Content
		v.Types[a.ID] = TypeUserDefined
		if a.Special {
			v.Types[a.ID] = TypeControl
		}
		var s Strip
		if a.LStrip {
			s |= StripLeft
		}
		if a.RStrip {
			s |= StripRight
		}
		if s != 0 {
			if v.Strip == nil {
				v.Strip = map[int]Strip{}
			}
			v.Strip[a.ID] = s
		}
	}
	fillHoles(v)
	return v, nil
}

// hfMerges returns the merges, given as "a b" strings or as ["a", "b"] pairs, as "a b"
// strings.
func hfMerges(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err == nil {
		for i, s := range out {
			if _, _, ok := splitMerge(s); !ok {
				return nil, fmt.Errorf("merge %d %q is not two tokens separated by a space", i, s)
			}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges are neither \"a b\" strings nor [\"a\", \"b\"] pairs: %w", err)
	}
	out = make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return nil, fmt.Errorf("merge %d %q is not a pair of tokens", i, p)
		}
		if strings.Contains(p[0], " ") || strings.Contains(p[1], " ") {
			return nil, fmt.Errorf("merge %d %q has a token with a space, which \"a b\" merges cannot hold", i, p)
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// components decodes a component and, recursively, the members of Sequence components, in
// order.
func components(raw json.RawMessage) ([]hfComponent, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	if c.Type != "Sequence" {
		return []hfComponent{c}, nil
	}
	var out []hfComponent
	for _, list := range [][]json.RawMessage{c.Children, c.Normalizers, c.Processors} {
		for _, child := range list {
			cs, err := components(child)
			if err != nil {
				return nil, err
			}
			out = append(out, cs...)
		}
	}
	return out, nil
}

// isSentencePieceStyle reports whether a BPE tokenizer.json is a SentencePiece conversion:
// byte fallback, or spaces written as "▁" by a Metaspace pre-tokenizer or a Replace
// normalizer.
func isSentencePieceStyle(hf *hfTokenizer) bool {
	if hf.Model.ByteFallback {
		return true
	}
	pre, _ := components(hf.PreTokenizer)
	for _, c := range pre {
		if c.Type == "Metaspace" {
			return true
		}
	}
	norm, _ := components(hf.Normalizer)
	for _, c := range norm {
		if c.Type == "Replace" && c.Content == spaceMarker {
			return true
		}
	}
	return false
}

// hfByteLevelVocab builds a "gpt2" vocab. Its pre-tokenizer becomes the tokenizer.ggml.pre
// name of the same split when there is one, else PreSteps.
func hfByteLevelVocab(hf *hfTokenizer, vocab map[string]int) (*Vocab, error) {
	pre, err := components(hf.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	var steps []PreStep
	byteLevel := false
	isolated := func(c hfComponent) error {
		if (c.Behavior == "" || c.Behavior == "Isolated") && !c.Invert {
			return nil
		}
		if c.Type == "Split" && c.Behavior == "Removed" && c.Invert && hfWholeCover[c.Pattern.Regex] {
			return nil // the matches cover the text: nothing is removed
		}
		return fmt.Errorf("pre_tokenizer: %s with behavior %q (invert %v) is not supported (Isolated is)", c.Type, c.Behavior, c.Invert)
	}
	for _, c := range pre {
		switch c.Type {
		case "Split":
			if c.Pattern.Regex == "" {
				return nil, fmt.Errorf("pre_tokenizer: Split on a plain string %q is not supported", c.Pattern.String)
			}
			if err := isolated(c); err != nil {
				return nil, err
			}
			steps = append(steps, PreStep{Type: "Split", Pattern: c.Pattern.Regex})
		case "ByteLevel":
			byteLevel = true
			s := PreStep{Type: "ByteLevel", UseRegex: c.UseRegex == nil || *c.UseRegex,
				AddPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
			if s.UseRegex || s.AddPrefixSpace {
				steps = append(steps, s)
			}
		case "Digits":
			steps = append(steps, PreStep{Type: "Digits", IndividualDigits: c.Individual})
		case "Punctuation":
			if err := isolated(c); err != nil {
				return nil, err
			}
			steps = append(steps, PreStep{Type: "Punctuation"})
		default:
			return nil, fmt.Errorf("pre_tokenizer: %q is not supported for byte-level BPE", c.Type)
		}
	}
	if !byteLevel {
		return nil, fmt.Errorf("BPE model is neither byte-level (no ByteLevel pre-tokenizer) nor SentencePiece-style")
	}
	v, err := hfBaseVocab("gpt2", hf, vocab)
	if err != nil {
		return nil, err
	}
	if v.Pre = preNameForSteps(steps); v.Pre == "" {
		if _, err := buildPreSteps(steps); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
		v.PreSteps = steps
		if len(steps) == 0 {
			v.PreSteps = []PreStep{{Type: "ByteLevel"}} // the whole text is one word
		}
	}
	v.IgnoreMerges = hf.Model.IgnoreMerges
	if v.Merges, err = hfMerges(hf.Model.Merges); err != nil {
		return nil, err
	}
	return v, nil
}

// hfNormalizers reads the normalizer steps of a byte-level BPE tokenizer.json.
func hfNormalizers(cs []hfComponent) ([]Normalizer, error) {
	var out []Normalizer
	for _, c := range cs {
		n := Normalizer{Type: c.Type}
		switch c.Type {
		case "NFC", "NFKC", "NFD", "NFKD", "Lowercase", "StripAccents":
		case "Strip":
			n.Left, n.Right = c.StripLeft, c.StripRight
		case "Replace":
			if c.Pattern.String == "" {
				return nil, fmt.Errorf("Replace of a regular expression or of nothing (%q) is not supported", c.Pattern.Regex)
			}
			n.Old, n.New = c.Pattern.String, c.Content
		case "Prepend":
			n.New = c.Prepend
		default:
			return nil, fmt.Errorf("%q is not supported for byte-level BPE", c.Type)
		}
		out = append(out, n)
	}
	return out, nil
}

// hfSentencePieceVocab builds a "llama" vocab from a SentencePiece-style BPE tokenizer.json.
// A token made by merge r scores -r; the others (single characters, bytes, specials), which
// no merge makes, score below every merge.
func hfSentencePieceVocab(hf *hfTokenizer, vocab map[string]int) (*Vocab, error) {
	pre, err := components(hf.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	for _, c := range pre {
		if c.Type == "Metaspace" && c.Replacement != "" && c.Replacement != spaceMarker {
			return nil, fmt.Errorf("pre_tokenizer: Metaspace replacement %q is not supported (%q is)", c.Replacement, spaceMarker)
		}
	}
	v, err := hfBaseVocab("llama", hf, vocab)
	if err != nil {
		return nil, err
	}
	if v.Merges, err = hfMerges(hf.Model.Merges); err != nil {
		return nil, err
	}
	v.Scores = make([]float32, len(v.Tokens))
	scored := make([]bool, len(v.Tokens))
	for rank, m := range v.Merges {
		l, r, _ := splitMerge(m)
		if id, ok := vocab[l+r]; ok && !scored[id] {
			v.Scores[id] = -float32(rank)
			scored[id] = true
		}
	}
	for id := range v.Scores {
		if !scored[id] {
			v.Scores[id] = -float32(len(v.Merges) + id)
		}
	}
	v.Merges = nil // SentencePiece encodes by score
	for id, tok := range v.Tokens {
		if v.Types[id] == TypeNormal {
			if _, ok := parseByteToken(tok); ok {
				v.Types[id] = TypeByte
			}
		}
	}
	if hf.Model.UnkToken != nil {
		if id, ok := vocab[*hf.Model.UnkToken]; ok {
			v.UNK = id
			v.Types[id] = TypeUnknown
		}
	}
	v.AddSpacePrefix = hfAddsSpacePrefix(hf)
	return v, nil
}

// hfAddsSpacePrefix reports whether a SentencePiece-style tokenizer.json puts "▁" before the
// text: a Prepend("▁") normalizer, or a Metaspace pre-tokenizer that adds a prefix space.
func hfAddsSpacePrefix(hf *hfTokenizer) bool {
	norm, _ := components(hf.Normalizer)
	for _, c := range norm {
		if c.Type == "Prepend" && c.Prepend == spaceMarker {
			return true
		}
	}
	pre, _ := components(hf.PreTokenizer)
	for _, c := range pre {
		if c.Type != "Metaspace" {
			continue
		}
		switch c.PrependScheme {
		case "always", "first":
			return true
		case "never":
			return false
		}
		return c.AddPrefixSpace == nil || *c.AddPrefixSpace
	}
	return false
}

// hfWordPieceVocab builds a "bert" vocab; [CLS] ... [SEP] frame the text.
func hfWordPieceVocab(hf *hfTokenizer, vocab map[string]int) (*Vocab, error) {
	v, err := hfBaseVocab("bert", hf, vocab)
	if err != nil {
		return nil, err
	}
	if hf.Model.UnkToken != nil {
		if id, ok := vocab[*hf.Model.UnkToken]; ok {
			v.UNK = id
			v.Types[id] = TypeUnknown
		}
	}
	return v, nil
}

// hfSpecials sets the special token ids and the add-BOS/EOS flags from tokenizer_config.json,
// the post-processor and, failing those, well-known token texts.
func hfSpecials(v *Vocab, hf *hfTokenizer, cfg *hfConfig) error {
	ids := make(map[string]int, len(hf.AddedTokens))
	for _, a := range hf.AddedTokens {
		ids[a.Content] = a.ID
	}
	find := func(text string) int {
		if id, ok := ids[text]; ok {
			return id
		}
		for id, t := range v.Tokens { // rare: a special that is an ordinary vocab entry
			if t == text && v.Types[id] != TypeUnused {
				return id
			}
		}
		return -1
	}
	set := func(dst *int, ref hfTokenRef, field string) error {
		if !ref.Set || ref.Content == "" {
			return nil
		}
		id := find(ref.Content)
		if id < 0 {
			return fmt.Errorf("tokenizer_config %s %q is not in the vocab", field, ref.Content)
		}
		*dst = id
		return nil
	}
	for _, s := range []struct {
		dst   *int
		ref   hfTokenRef
		field string
	}{
		{&v.BOS, cfg.BOS, "bos_token"}, {&v.EOS, cfg.EOS, "eos_token"}, {&v.UNK, cfg.UNK, "unk_token"},
		{&v.PAD, cfg.PAD, "pad_token"}, {&v.SEP, cfg.SEP, "sep_token"}, {&v.CLS, cfg.CLS, "cls_token"},
		{&v.MASK, cfg.MASK, "mask_token"},
	} {
		if err := set(s.dst, s.ref, s.field); err != nil {
			return err
		}
	}

	post, err := components(hf.PostProcessor)
	if err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	var first, last string // special tokens around $A in the single-sequence template
	for _, c := range post {
		switch c.Type {
		case "TemplateProcessing":
			for i, p := range c.Single {
				if p.SpecialToken == nil {
					continue
				}
				if i == 0 {
					first = p.SpecialToken.ID
				} else if i == len(c.Single)-1 {
					last = p.SpecialToken.ID
				}
			}
		case "BertProcessing", "RobertaProcessing":
			if len(c.CLS) > 0 {
				first, _ = c.CLS[0].(string)
			}
			if len(c.SEP) > 0 {
				last, _ = c.SEP[0].(string)
			}
		}
	}

	// Fall back on well-known texts for what the config left unnamed.
	guess := func(dst *int, texts ...string) {
		for _, t := range texts {
			if *dst >= 0 {
				return
			}
			if t != "" {
				*dst = find(t)
			}
		}
	}
	if tokenizerConfigMissing(cfg) {
		guess(&v.BOS, first, "<|begin_of_text|>", "<s>")
		guess(&v.EOS, "<|end_of_text|>", "</s>", "<|endoftext|>")
		guess(&v.UNK, "<unk>", "[UNK]")
	}
	if v.Model == "bert" {
		guess(&v.CLS, first, "[CLS]")
		guess(&v.SEP, last, "[SEP]")
		guess(&v.PAD, "[PAD]")
		guess(&v.MASK, "[MASK]")
		guess(&v.UNK, "[UNK]")
		v.BOS, v.EOS = v.CLS, v.SEP
		v.AddBOS, v.AddEOS = v.CLS >= 0, v.SEP >= 0
	}
	guess(&v.EOT, "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>")

	if v.Model != "bert" {
		v.AddBOS = first != "" && v.BOS >= 0 && first == v.Tokens[v.BOS]
		v.AddEOS = last != "" && v.EOS >= 0 && last == v.Tokens[v.EOS]
		if cfg.AddBOSToken != nil {
			v.AddBOS = *cfg.AddBOSToken && v.BOS >= 0
		}
		if cfg.AddEOSToken != nil {
			v.AddEOS = *cfg.AddEOSToken && v.EOS >= 0
		}
	}
	for _, id := range []int{v.BOS, v.EOS, v.EOT} {
		if id >= 0 && v.Types[id] == TypeUserDefined {
			v.Types[id] = TypeControl
		}
	}
	return nil
}

// tokenizerConfigMissing reports whether no special token was named by tokenizer_config.json
// (or none was given).
func tokenizerConfigMissing(cfg *hfConfig) bool {
	return !cfg.BOS.Set && !cfg.EOS.Set && !cfg.UNK.Set
}

// hfUnigramVocab builds a "t5" vocab from a Unigram tokenizer.json (T5 and other
// SentencePiece unigram models): the vocab is a list of [piece, score]; the Precompiled
// normalizer gives the character map; WhitespaceSplit before Metaspace drops extra spaces
// (every word then gets "▁"), and Metaspace's prepend scheme decides the space prefix.
func hfUnigramVocab(hf *hfTokenizer) (*Vocab, error) {
	var entries [][]json.RawMessage
	if err := json.Unmarshal(hf.Model.Vocab, &entries); err != nil {
		return nil, fmt.Errorf("model \"Unigram\": vocab is not a list of [piece, score]: %w", err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("model \"Unigram\" has an empty vocab")
	}
	if hf.Model.ByteFallback {
		return nil, fmt.Errorf("model \"Unigram\" with byte_fallback is not supported")
	}
	v := newEmptyVocab("t5", "", len(entries))
	v.Scores = make([]float32, len(entries))
	for id, e := range entries {
		if len(e) != 2 || json.Unmarshal(e[0], &v.Tokens[id]) != nil || json.Unmarshal(e[1], &v.Scores[id]) != nil {
			return nil, fmt.Errorf("model \"Unigram\": vocab entry %d is not [piece, score]", id)
		}
		v.Types[id] = TypeNormal
	}
	for _, a := range hf.AddedTokens {
		if a.ID < 0 || a.ID >= len(v.Tokens) {
			return nil, fmt.Errorf("added token %q has id %d outside the vocab", a.Content, a.ID)
		}
		v.Tokens[a.ID] = a.Content
		v.Types[a.ID] = TypeUserDefined
		if a.Special {
			v.Types[a.ID] = TypeControl
		}
	}
	if id := hf.Model.UnkID; id != nil {
		if *id < 0 || *id >= len(v.Tokens) {
			return nil, fmt.Errorf("model \"Unigram\": unk_id %d outside the vocab", *id)
		}
		v.UNK = *id
		v.Types[*id] = TypeUnknown
	}
	norm, err := components(hf.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	for _, c := range norm {
		switch {
		case c.Type == "Precompiled":
			v.CharsMap = c.CharsMap
			if len(c.CharsMap) > 0 && parseCharsMap(c.CharsMap) == nil {
				return nil, fmt.Errorf("normalizer: Precompiled: malformed precompiled_charsmap")
			}
		case c.Type == "Replace" && c.Pattern.Regex == " {2,}" && c.Content == " ":
			v.RemoveExtraSpaces = true
		default:
			return nil, fmt.Errorf("normalizer: %q is not supported for a Unigram model", c.Type)
		}
	}
	pre, err := components(hf.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	for _, c := range pre {
		switch c.Type {
		case "WhitespaceSplit":
			v.RemoveExtraSpaces = true
		case "Metaspace":
			if c.Replacement != "" && c.Replacement != spaceMarker {
				return nil, fmt.Errorf("pre_tokenizer: Metaspace replacement %q is not supported (%q is)", c.Replacement, spaceMarker)
			}
			switch c.PrependScheme {
			case "always", "first":
				v.AddSpacePrefix = true
			case "never":
			default:
				v.AddSpacePrefix = c.AddPrefixSpace == nil || *c.AddPrefixSpace
			}
		default:
			return nil, fmt.Errorf("pre_tokenizer: %q is not supported for a Unigram model", c.Type)
		}
	}
	return v, nil
}
