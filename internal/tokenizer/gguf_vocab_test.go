package tokenizer_test

import (
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// The GGUF vocabulary reader lives in package format, above this one; the tests of package
// tokenizer reach it through tokenizer.ReadGGUFVocab (helpers_test.go).
func init() {
	tokenizer.ReadGGUFVocab = func(path string) (*tokenizer.Vocab, error) { return format.LoadVocab(path, 0) }
}
