package tokenizer

import (
	"os"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestSPMVectorsLlama(t *testing.T) {
	tok := runVocabVectors(t, "ggml-vocab-llama-spm.gguf")
	if tok.Kind() != "spm" {
		t.Fatalf("kind %q", tok.Kind())
	}
}

func TestSPMVectorsPhi3(t *testing.T) {
	runVocabVectors(t, "ggml-vocab-phi-3.gguf")
}

func BenchmarkEncodeSPM(b *testing.B) {
	tok := loadGGUFTokenizer(b, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	data, err := os.ReadFile(testdata.Path(b, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		b.Fatal(err)
	}
	text := string(data[:64<<10])
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text, EncodeOptions{AddSpecial: true})
	}
}

func BenchmarkDecodeStreamSPM(b *testing.B) {
	tok := loadGGUFTokenizer(b, "tokenizers/vocab/ggml-vocab-llama-spm.gguf")
	data, err := os.ReadFile(testdata.Path(b, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		b.Fatal(err)
	}
	ids := tok.Encode(string(data[:64<<10]), EncodeOptions{})
	b.SetBytes(64 << 10)
	for b.Loop() {
		d := NewDetokenizer(tok, true)
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
	}
}
