package tokenizer

import (
	"bytes"
	"slices"
	"testing"
)

// TestEncodePiece: a piece is tokenized without BOS, EOS or SentencePiece's dummy prefix,
// its tokens spell it byte for byte, and on a byte-level BPE vocabulary (where no dummy
// prefix exists) it is Encode's tokenization.
func TestEncodePiece(t *testing.T) {
	_, spm := loadTok512(t)
	bpe := loadLlama3(t)
	pieces := []string{"name", `": "`, "Once upon a time", " there", "é1"}
	for _, tc := range []struct {
		name string
		tok  *Tokenizer
	}{{"spm", spm}, {"llama3", bpe}} {
		for _, p := range pieces {
			ids := tc.tok.EncodePiece([]byte(p))
			var spelled []byte
			for _, id := range ids {
				spelled = append(spelled, tc.tok.TokenBytes(id)...)
			}
			if !bytes.Equal(spelled, []byte(p)) {
				t.Errorf("%s: %q is tokenized as %v, spelling %q", tc.name, p, ids, spelled)
			}
			if tc.name == "llama3" {
				if want := tc.tok.Encode(p, EncodeOptions{}); !slices.Equal(ids, want) {
					t.Errorf("llama3: %q: %v, Encode %v", p, ids, want)
				}
			}
		}
	}
}
