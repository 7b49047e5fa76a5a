package tokenizer

import (
	"os"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func loadLlama3(t testing.TB) *Tokenizer {
	t.Helper()
	enc := testdata.Path(t, "tokenizers/llama3/encoder.json")
	bpe := testdata.Path(t, "tokenizers/llama3/vocab.bpe")
	v, err := VocabFromLlama3Files(enc, bpe)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func loadQwen3(t testing.TB) *Tokenizer {
	t.Helper()
	js, err := os.ReadFile(testdata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(testdata.Path(t, "tokenizers/qwen3/tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := VocabFromHF(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// checkBPEVectors encodes every case of llama.cpp's vectors NAME with tok (no BOS, no special
// parsing), compares with the expected ids and checks that decoding gives the text back.
func checkBPEVectors(t *testing.T, tok *Tokenizer, name string) {
	t.Helper()
	cases := readVocabCases(t, name)
	if len(cases) < 40 {
		t.Fatalf("%s: only %d cases", name, len(cases))
	}
	for i, c := range cases {
		got := tok.Encode(c.text, EncodeOptions{})
		if !equalIDs(got, c.ids) {
			t.Errorf("%s case %d %q:\n got %v\nwant %v", name, i, c.text, got, c.ids)
		}
		if back := tok.Decode(got, false); back != c.text {
			t.Errorf("%s case %d: Decode(Encode(%q)) = %q", name, i, c.text, back)
		}
	}
}

func TestBPEVectorsLlama3(t *testing.T) {
	checkBPEVectors(t, loadLlama3(t), "ggml-vocab-llama-bpe.gguf")
}

func TestBPEVectorsQwen2(t *testing.T) {
	checkBPEVectors(t, loadQwen3(t), "ggml-vocab-qwen2.gguf")
}

func TestBPEVectorsGPT2(t *testing.T) {
	checkBPEVectors(t, loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-gpt-2.gguf"), "ggml-vocab-gpt-2.gguf")
}

func TestBPEVectorsDeepSeekLLM(t *testing.T) {
	checkBPEVectors(t, loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-deepseek-llm.gguf"), "ggml-vocab-deepseek-llm.gguf")
}

// TestQwenNFC: Qwen's tokenizer.json normalizes text to NFC, so a decomposed "é" (e and a
// combining acute accent) encodes as the precomposed one does; Llama 3's has no
// normalizer and keeps the two apart.
func TestQwenNFC(t *testing.T) {
	decomposed, precomposed := "caf\u0065\u0301 au lait", "caf\u00e9 au lait"
	qwen := loadQwen3(t)
	if got, want := qwen.Encode(decomposed, EncodeOptions{}), qwen.Encode(precomposed, EncodeOptions{}); !equalIDs(got, want) {
		t.Errorf("qwen: decomposed %v, precomposed %v", got, want)
	}
	llama := loadLlama3(t)
	if equalIDs(llama.Encode(decomposed, EncodeOptions{}), llama.Encode(precomposed, EncodeOptions{})) {
		t.Errorf("llama 3 normalized a decomposed accent it has no normalizer for")
	}
}
