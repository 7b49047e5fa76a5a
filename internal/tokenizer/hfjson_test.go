package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestVocabFromHFQwen3(t *testing.T) {
	tok := loadQwen3(t)
	v := tok.Vocab()
	if v.Model != "gpt2" || v.Pre != "qwen2" || len(v.Tokens) != 151669 || len(v.Merges) != 151387 {
		t.Fatalf("model %q pre %q, %d tokens, %d merges", v.Model, v.Pre, len(v.Tokens), len(v.Merges))
	}
	if v.BOS != -1 || v.AddBOS || v.AddEOS {
		t.Errorf("BOS %d addBOS %v addEOS %v: Qwen3 adds nothing", v.BOS, v.AddBOS, v.AddEOS)
	}
	if v.EOS != 151645 || v.PAD != 151643 || v.EOT != 151645 {
		t.Errorf("EOS %d PAD %d EOT %d", v.EOS, v.PAD, v.EOT)
	}
	for id, want := range map[int]TokenType{0: TypeNormal, 151643: TypeControl, 151644: TypeControl, 151667: TypeUserDefined, 151668: TypeUserDefined} {
		if v.Types[id] != want {
			t.Errorf("token %d %q: type %d, want %d", id, v.Tokens[id], v.Types[id], want)
		}
	}
	got := tok.Encode("<|im_start|>user\nHi<|im_end|>", EncodeOptions{AddSpecial: true, ParseSpecial: true})
	if len(got) < 4 || got[0] != 151644 || got[len(got)-1] != 151645 {
		t.Errorf("chat turn: %v", got)
	}
}

// hfTiny returns a small tokenizer.json: the byte-level alphabet plus a few merges, added
// tokens (one special, one not, one leaving a hole before it), a pre-tokenizer and a
// post-processor given as JSON fragments.
func hfTiny(t testing.TB, pairMerges bool, preTokenizer, postProcessor string) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[byteLevelEncode([]byte{byte(b)})] = b
	}
	merges := [][2]string{{"Ġ", "h"}, {"Ġh", "i"}, {"h", "i"}}
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	var mergesJSON []byte
	if pairMerges {
		mergesJSON, _ = json.Marshal(merges)
	} else {
		var s []string
		for _, m := range merges {
			s = append(s, m[0]+" "+m[1])
		}
		mergesJSON, _ = json.Marshal(s)
	}
	vocabJSON, _ := json.Marshal(vocab)
	n := len(vocab)
	return fmt.Appendf(nil, `{
  "version": "1.0",
  "added_tokens": [
    {"id": %d, "content": "<s>", "special": true, "lstrip": false, "rstrip": false},
    {"id": %d, "content": "</s>", "special": true},
    {"id": %d, "content": "<tool>", "special": false, "rstrip": true}
  ],
  "normalizer": null,
  "pre_tokenizer": %s,
  "post_processor": %s,
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": %s, "merges": %s}
}`, n, n+1, n+3, preTokenizer, postProcessor, vocabJSON, mergesJSON)
}

const (
	hfPreGPT2      = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`
	hfTemplateBOS  = `{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {}}`
	hfTemplateNone = `{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}`
)

func hfPreSplit(regexes ...string) string {
	var parts []string
	for _, r := range regexes {
		js, _ := json.Marshal(r)
		parts = append(parts, fmt.Sprintf(`{"type": "Split", "pattern": {"Regex": %s}, "behavior": "Isolated", "invert": false}`, js))
	}
	parts = append(parts, `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`)
	return `{"type": "Sequence", "pretokenizers": [` + strings.Join(parts, ", ") + `]}`
}

func TestVocabFromHFByteLevel(t *testing.T) {
	strs, err := VocabFromHF(hfTiny(t, false, hfPreGPT2, hfTemplateBOS), nil)
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := VocabFromHF(hfTiny(t, true, hfPreGPT2, hfTemplateBOS), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(strs.Merges, pairs.Merges) || !slices.Equal(strs.Tokens, pairs.Tokens) {
		t.Fatalf("merges as strings and as pairs differ:\n%q\n%q", strs.Merges, pairs.Merges)
	}
	v := strs
	if v.Model != "gpt2" || v.Pre != "gpt-2" || len(v.Tokens) != 263 || !slices.Equal(v.Merges, []string{"Ġ h", "Ġh i", "h i"}) {
		t.Fatalf("model %q pre %q, %d tokens, merges %q", v.Model, v.Pre, len(v.Tokens), v.Merges)
	}
	if v.BOS != 259 || v.EOS != 260 || !v.AddBOS || v.AddEOS {
		t.Errorf("BOS %d EOS %d addBOS %v addEOS %v (no config: guessed from texts and template)", v.BOS, v.EOS, v.AddBOS, v.AddEOS)
	}
	if v.Tokens[261] != "[PAD261]" || v.Types[261] != TypeUnused || v.Types[259] != TypeControl || v.Types[262] != TypeUserDefined {
		t.Errorf("hole %q type %d; <s> type %d; <tool> type %d", v.Tokens[261], v.Types[261], v.Types[259], v.Types[262])
	}
	if v.Strip[262] != StripRight {
		t.Errorf("strip flags %v", v.Strip)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode("hi hi", EncodeOptions{AddSpecial: true})
	want := []int{259, 258, 257}
	if !slices.Equal(got, want) {
		t.Errorf("encode: got %v, want %v", got, want)
	}
}

func TestVocabFromHFConfig(t *testing.T) {
	js := hfTiny(t, false, hfPreGPT2, hfTemplateNone)
	for _, cfg := range []string{
		`{"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false}, "add_bos_token": true, "unk_token": null}`,
		`{"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "add_bos_token": true, "add_eos_token": true}`,
	} {
		v, err := VocabFromHF(js, []byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		if v.BOS != 259 || v.EOS != 260 || !v.AddBOS || v.AddEOS != strings.Contains(cfg, "add_eos_token") {
			t.Errorf("%s: BOS %d EOS %d addBOS %v addEOS %v", cfg, v.BOS, v.EOS, v.AddBOS, v.AddEOS)
		}
	}
	v, err := VocabFromHF(js, []byte(`{"eos_token": "</s>"}`))
	if err != nil {
		t.Fatal(err)
	}
	if v.BOS != -1 || v.AddBOS {
		t.Errorf("config without bos_token: BOS %d addBOS %v", v.BOS, v.AddBOS)
	}
	if _, err := VocabFromHF(js, []byte(`{"eos_token": "<nope>"}`)); err == nil {
		t.Error("eos_token missing from the vocab accepted")
	}
	if _, err := VocabFromHF(js, []byte(`{"eos_token": 3}`)); err == nil {
		t.Error("eos_token of the wrong JSON type accepted")
	}
}

func TestVocabFromHFPreDetection(t *testing.T) {
	cases := []struct {
		pre     string
		want    string
		wantErr string
	}{
		{hfPreGPT2, "gpt-2", ""},
		{hfPreSplit(hfRegexGPT2), "gpt-2", ""},
		{hfPreSplit(hfRegexLlama3), "llama-bpe", ""},
		{hfPreSplit(hfRegexQwen2), "qwen2", ""},
		{hfPreSplit(hfDeepSeekLLMRegexes...), "deepseek-llm", ""},
		{hfPreSplit(`\p{L}+|\s+`), "", "unknown pre-tokenizer"},
		{hfPreSplit(hfDeepSeekLLMRegexes[:3]...), "", "unknown pre-tokenizer"},
		{`{"type": "Whitespace"}`, "", "not supported"},
		{`null`, "", "neither byte-level"},
	}
	for _, c := range cases {
		v, err := VocabFromHF(hfTiny(t, false, c.pre, "null"), nil)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want one about %q", c.pre, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.pre, err)
			continue
		}
		if v.Pre != c.want {
			t.Errorf("%s: pre %q, want %q", c.pre, v.Pre, c.want)
		}
	}
}

// hfSentencePieceTiny is a Llama-2-style tokenizer.json: byte fallback, "▁" for spaces.
const hfSentencePieceTiny = `{
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
  "decoder": null,
  "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁": 4, "a": 5, "b": 6, "▁a": 7, "ab": 8, "▁ab": 9},
    "merges": ["▁ a", "a b", "▁a b"]}
}`

func TestVocabFromHFSentencePiece(t *testing.T) {
	v, err := VocabFromHF([]byte(hfSentencePieceTiny), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "llama" || !v.AddSpacePrefix || !v.AddBOS || v.BOS != 1 || v.EOS != 2 || v.UNK != 0 {
		t.Fatalf("model %q addSpacePrefix %v addBOS %v BOS %d EOS %d UNK %d", v.Model, v.AddSpacePrefix, v.AddBOS, v.BOS, v.EOS, v.UNK)
	}
	if v.Types[3] != TypeByte || v.Types[0] != TypeUnknown || v.Types[1] != TypeControl || v.Types[5] != TypeNormal {
		t.Errorf("types %v", v.Types)
	}
	if !(v.Scores[7] > v.Scores[8] && v.Scores[8] > v.Scores[9] && v.Scores[9] > v.Scores[5]) {
		t.Errorf("scores do not follow the merge ranks: %v", v.Scores)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("ab a\n", EncodeOptions{AddSpecial: true}); !slices.Equal(got, []int{1, 9, 7, 3}) {
		t.Errorf("encode: got %v, want [1 9 7 3]", got)
	}
}

func TestVocabFromHFWordPiece(t *testing.T) {
	js := `{"added_tokens": [{"id": 0, "content": "[PAD]", "special": true}, {"id": 1, "content": "[UNK]", "special": true},
	  {"id": 2, "content": "[CLS]", "special": true}, {"id": 3, "content": "[SEP]", "special": true}, {"id": 4, "content": "[MASK]", "special": true}],
	  "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
	  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
	    "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6, "##s": 7}}}`
	v, err := VocabFromHF([]byte(js), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "bert" || v.CLS != 2 || v.SEP != 3 || v.UNK != 1 || v.PAD != 0 || v.MASK != 4 || v.BOS != 2 || v.EOS != 3 {
		t.Errorf("model %q CLS %d SEP %d UNK %d PAD %d MASK %d BOS %d EOS %d", v.Model, v.CLS, v.SEP, v.UNK, v.PAD, v.MASK, v.BOS, v.EOS)
	}
	if v.Types[1] != TypeUnknown || v.Types[2] != TypeControl || v.Types[5] != TypeNormal {
		t.Errorf("types %v", v.Types)
	}
}

func TestVocabFromHFErrors(t *testing.T) {
	for _, js := range []string{
		``, `{`, `[]`,
		`{"model": {"type": "WordLevel", "vocab": {"a": 0}}}`,
		`{"model": {"type": "BPE", "vocab": {}}}`,
		`{"model": {"type": "BPE", "vocab": {"a": -4}}}`,
		`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}}`,
		`{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}`,
		`{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}}`,
		`{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a b", "c"]]}}`,
		`{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": 7}}`,
		`{"added_tokens": [{"id": -1, "content": "x"}], "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}}}`,
	} {
		if _, err := VocabFromHF([]byte(js), nil); err == nil {
			t.Errorf("%s: no error", js)
		}
	}
	if _, err := VocabFromHF(hfTiny(t, false, hfPreGPT2, "null"), []byte("{")); err == nil {
		t.Error("bad tokenizer_config.json accepted")
	}
}

// FuzzVocabFromHF feeds tokenizer.json files, and the config after a NUL byte when there is
// one, to VocabFromHF; whatever it accepts must be a consistent vocab that New and Encode
// handle.
func FuzzVocabFromHF(f *testing.F) {
	f.Add(string(hfTiny(f, false, hfPreGPT2, hfTemplateBOS)))
	f.Add(string(hfTiny(f, true, hfPreSplit(hfRegexLlama3), "null")) + "\x00" + `{"bos_token": "<s>"}`)
	f.Add(hfSentencePieceTiny + "\x00" + `{"add_bos_token": false}`)
	f.Add(`{"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}}}`)
	f.Add(string(hfTiny(f, false, `{"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "Punctuation"},
		{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}]}`, "null")))
	f.Add(strings.Replace(string(hfTiny(f, false, hfPreSplit(hfRegexGPT4o), "null")), `"normalizer": null`,
		`"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Strip", "strip_left": true}]}`, 1))
	f.Add(string(hfUnigramJSON(f, handCharsMap())))
	f.Fuzz(func(t *testing.T, in string) {
		js, cfg, _ := strings.Cut(in, "\x00")
		v, err := VocabFromHF([]byte(js), []byte(cfg))
		if err != nil {
			return
		}
		if len(v.Tokens) == 0 || len(v.Types) != len(v.Tokens) {
			t.Fatalf("%d tokens, %d types", len(v.Tokens), len(v.Types))
		}
		for _, id := range []int{v.BOS, v.EOS, v.UNK, v.PAD, v.SEP, v.CLS, v.MASK, v.EOT} {
			if id < -1 || id >= len(v.Tokens) {
				t.Fatalf("special id %d out of range", id)
			}
		}
		tok, err := New(v)
		if err != nil {
			return
		}
		tok.Encode("hi there\n", EncodeOptions{AddSpecial: true, ParseSpecial: true})
	})
}
