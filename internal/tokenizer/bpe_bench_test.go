package tokenizer

import (
	"os"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// BenchmarkBPEEncodeLlama3 encodes 100 KB of Tiny Shakespeare with the Llama 3 vocabulary;
// b.SetBytes makes `go test -bench` report MB/s.
func BenchmarkBPEEncodeLlama3(b *testing.B) {
	text, err := os.ReadFile(testdata.Path(b, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		b.Fatal(err)
	}
	if len(text) > 100<<10 {
		text = text[:100<<10]
	}
	tok := loadLlama3(b)
	s := string(text)
	b.SetBytes(int64(len(s)))
	b.ResetTimer()
	for b.Loop() {
		ids := tok.Encode(s, EncodeOptions{})
		if len(ids) == 0 {
			b.Fatal("no tokens")
		}
	}
}
