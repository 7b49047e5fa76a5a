package format

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// loadGGUFTokenizer opens a shared GGUF file and builds its tokenizer.
func loadGGUFTokenizer(t testing.TB, rel string) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Open(testdata.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := vocabFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// kvMeta is an in-memory ggufMeta.
type kvMeta map[string]gguf.Value

func (m kvMeta) Get(key string) (gguf.Value, bool) { v, ok := m[key]; return v, ok }

func writeParse(t testing.TB, kvs []gguf.KV) *gguf.File {
	t.Helper()
	f, err := gguf.Parse("mem.gguf", encodeGGUF(t, kvs, nil))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGGUFMetadataRoundTrip(t *testing.T) {
	tok := loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	v := tok.Vocab()
	f := writeParse(t, vocabMetadata(v))
	got, err := vocabFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", summary(got), summary(v))
	}

	syn := &tokenizer.Vocab{Model: "gpt2", Pre: "qwen2", Tokens: []string{"a", "b", "ab", "<|im_end|>"},
		Types: []tokenizer.TokenType{1, 1, 1, 3}, Merges: []string{"a b"}, BOS: -1, EOS: 3, UNK: -1, PAD: 3,
		SEP: -1, CLS: -1, MASK: -1, EOT: 3, AddEOS: false}
	got, err = vocabFromGGUF(writeParse(t, vocabMetadata(syn)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, syn) {
		t.Fatalf("gpt2 round trip differs:\n got %+v\nwant %+v", summary(got), summary(syn))
	}
}

func summary(v *tokenizer.Vocab) tokenizer.Vocab {
	s := *v
	s.Tokens, s.Scores, s.Types, s.Merges = s.Tokens[:min(4, len(s.Tokens))], nil, nil, nil
	return s
}

func TestVocabFromGGUFDefaults(t *testing.T) {
	toks := gguf.Strings([]string{"<unk>", "<s>", "</s>", "a"})
	tests := []struct {
		name string
		meta kvMeta
		want func(v *tokenizer.Vocab) bool
	}{
		{"llama defaults", kvMeta{keyModel: gguf.String("llama"), keyTokens: toks},
			func(v *tokenizer.Vocab) bool {
				return v.BOS == 1 && v.EOS == 2 && v.UNK == 0 && v.AddBOS && !v.AddEOS && v.AddSpacePrefix && v.PAD == -1
			}},
		{"llama overrides", kvMeta{keyModel: gguf.String("llama"), keyTokens: toks,
			keyAddBOS: gguf.Bool(false), keyAddPrefix: gguf.Bool(false), keyEOS: gguf.Uint32(3),
			keySEP: gguf.Uint32(0xFFFFFFFF)},
			func(v *tokenizer.Vocab) bool { return !v.AddBOS && !v.AddSpacePrefix && v.EOS == 3 && v.SEP == -1 }},
		{"bert defaults past a small vocab", kvMeta{keyModel: gguf.String("bert"), keyTokens: toks},
			func(v *tokenizer.Vocab) bool { return v.BOS == -1 && v.UNK == -1 && v.PAD == 0 && !v.AddBOS }},
		{"gpt2 llama-bpe adds bos", kvMeta{keyModel: gguf.String("gpt2"), keyPre: gguf.String("llama-bpe"),
			keyTokens: toks, keyBOS: gguf.Uint32(1)},
			func(v *tokenizer.Vocab) bool { return v.AddBOS && v.BOS == 1 && v.EOS == -1 && !v.AddSpacePrefix }},
		{"eom is eog", kvMeta{keyModel: gguf.String("gpt2"), keyTokens: toks, keyEOM: gguf.Uint32(3)},
			func(v *tokenizer.Vocab) bool { return len(v.EOG) == 1 && v.EOG[0] == 3 }},
	}
	for _, tc := range tests {
		v, err := vocabFromGGUF(tc.meta)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.want(v) {
			t.Errorf("%s: unexpected vocab %+v", tc.name, v)
		}
	}
}

func TestVocabFromGGUFErrors(t *testing.T) {
	toks := gguf.Strings([]string{"a", "b"})
	bad := []kvMeta{
		{},
		{keyModel: gguf.String("llama")},
		{keyModel: gguf.String("llama"), keyTokens: gguf.String("x")},
		{keyModel: gguf.String("llama"), keyTokens: gguf.Strings(nil)},
		{keyModel: gguf.String("llama"), keyTokens: toks, keyScores: gguf.Float32s([]float32{1})},
		{keyModel: gguf.String("llama"), keyTokens: toks, keyTokenType: gguf.Int32s([]int32{1, 1, 1})},
		{keyModel: gguf.String("llama"), keyTokens: toks, keyMerges: gguf.Uint32(1)},
		{keyModel: gguf.String("no-such-model"), keyTokens: toks},
		{keyModel: gguf.String("t5"), keyTokens: toks, keyCharsMap: gguf.Strings([]string{"x"})},
	}
	for i, m := range bad {
		if v, err := vocabFromGGUF(m); err == nil {
			t.Errorf("case %d: no error, vocab %+v", i, v)
		}
	}
}

func TestVocabFromGGUFBert(t *testing.T) {
	tok := loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-bert-bge.gguf")
	v := tok.Vocab()
	if v.CLS != 101 || v.BOS != 101 || v.SEP != 102 || v.UNK != 100 || v.PAD != 0 || v.MASK != 103 || v.EOS != -1 {
		t.Fatalf("bert specials %+v", summary(v))
	}
	got := tok.Encode("Hello world!", tokenizer.EncodeOptions{AddSpecial: true})
	want := []int{101, 7592, 2088, 999, 102}
	if !slices.Equal(got, want) {
		t.Fatalf("Encode = %v, want %v", got, want)
	}
	if s := tok.Decode(got, true); s != "hello world !" { // no clean-up of spaces before punctuation
		t.Fatalf("Decode = %q", s)
	}
}

// fuzzTexts are texts every fuzzed vocabulary encodes and decodes.
var fuzzTexts = []string{
	"", " ", "Hello world", "  two  spaces\n\nnewlines\t", "日本語 🙂 naïve", "\xff\xfe\x80 invalid",
	"<s>special</s><unk>", "\xe6\x97", "a\x00b",
}

// FuzzVocabFromGGUF: arbitrary GGUF metadata never makes vocabFromGGUF, New or Encode panic.
func FuzzVocabFromGGUF(f *testing.F) {
	small := loadGGUFTokenizer(f, "models/stories260K/stories260K.gguf")
	seeds := []*tokenizer.Vocab{small.Vocab(),
		{Model: "bert", Tokens: []string{"[UNK]", "▁a", "b"}, BOS: -1, EOS: -1, UNK: 0, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1},
	}
	for _, v := range seeds {
		var buf bytes.Buffer
		w, err := gguf.NewWriter(&buf, 3)
		if err != nil {
			f.Fatal(err)
		}
		for _, kv := range vocabMetadata(v) {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				f.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := gguf.Parse("fuzz.gguf", data)
		if err != nil {
			return
		}
		v, err := vocabFromGGUF(file)
		if err != nil {
			return
		}
		tok, err := tokenizer.New(v)
		if err != nil {
			return
		}
		for _, s := range fuzzTexts {
			ids := tok.Encode(s, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
			tok.Decode(ids, false)
		}
	})
}

// TestGGUFUnigramAndRWKVRoundTrip: t5 (unigram) and rwkv vocabs survive a GGUF write and
// read, the t5 defaults (EOS 1, UNK 2, PAD 0, EOS added) apply, and the character map and
// remove_extra_whitespaces come back.
func TestGGUFUnigramAndRWKVRoundTrip(t *testing.T) {
	t5 := &tokenizer.Vocab{Model: "t5", Tokens: []string{"<pad>", "</s>", "<unk>", "▁a"},
		Scores: []float32{0, 0, 0, -1}, Types: []tokenizer.TokenType{3, 3, 2, 1},
		BOS: -1, EOS: 1, UNK: 2, PAD: 0, SEP: -1, CLS: -1, MASK: -1, EOT: -1,
		AddEOS: true, AddSpacePrefix: true, RemoveExtraSpaces: true, CharsMap: []byte{4, 0, 0, 0, 0, 4, 0, 0, 0}}
	rwkv := &tokenizer.Vocab{Model: "rwkv", Tokens: []string{"a", "\\n"}, Types: []tokenizer.TokenType{1, 1},
		BOS: -1, EOS: -1, UNK: -1, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1}
	for _, v := range []*tokenizer.Vocab{t5, rwkv} {
		got, err := vocabFromGGUF(writeParse(t, vocabMetadata(v)))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%s round trip differs:\n got %+v\nwant %+v", v.Model, *got, *v)
		}
	}
	got, err := vocabFromGGUF(kvMeta{"tokenizer.ggml.model": gguf.String("t5"),
		"tokenizer.ggml.tokens": gguf.Strings([]string{"<pad>", "</s>", "<unk>"})})
	if err != nil {
		t.Fatal(err)
	}
	if got.EOS != 1 || got.UNK != 2 || got.PAD != 0 || got.BOS != -1 || !got.AddEOS || got.AddBOS {
		t.Errorf("t5 defaults: %+v", *got)
	}
}

// TestVocabFromGGUFGemma4: Gemma 4's BPE ("gemma4" model) has no default special tokens and
// always adds BOS, as llama.cpp does, even when the file says not to.
func TestVocabFromGGUFGemma4(t *testing.T) {
	got, err := vocabFromGGUF(kvMeta{keyModel: gguf.String("gemma4"), keyTokens: gguf.Strings([]string{"<pad>", "<bos>", "a"}),
		keyBOS: gguf.Uint32(1), keyAddBOS: gguf.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if got.BOS != 1 || !got.AddBOS || got.EOS != -1 || got.UNK != -1 {
		t.Errorf("gemma4: %+v", *got)
	}
	if _, err := tokenizer.New(got); err != nil {
		t.Error(err)
	}
}

func TestVocabFitsGGUF(t *testing.T) {
	v := &tokenizer.Vocab{Model: "gpt2", PreSteps: []tokenizer.PreStep{{Type: "Digits"}}}
	if err := vocabFitsGGUF(v); err == nil {
		t.Error("pre-tokenizer steps accepted")
	}
	v = &tokenizer.Vocab{Model: "gpt2", Normalizers: []tokenizer.Normalizer{{Type: "Lowercase"}}}
	if err := WriteGGUF(t.TempDir()+"/x.gguf", Contents{Vocab: v}, 0, nil, nil); err == nil {
		t.Error("normalizer accepted")
	}
	if err := vocabFitsGGUF(&tokenizer.Vocab{Model: "gpt2", Pre: "qwen2", NFC: true}); err != nil {
		t.Error(err)
	}
}
