package tokenizer

import (
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// limitTokenizers are a tokenizer of each kind: SentencePiece (Llama's and Phi-3's), byte-level
// BPE (GPT-2's) and WordPiece (BERT's).
func limitTokenizers(t testing.TB) map[string]*Tokenizer {
	return map[string]*Tokenizer{
		"llama-spm": loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-llama-spm.gguf"),
		"phi-3":     loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-phi-3.gguf"),
		"gpt-2":     loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-gpt-2.gguf"),
		"bert":      loadGGUFTokenizer(t, "tokenizers/vocab/ggml-vocab-bert-bge.gguf"),
	}
}

// limitTexts are llama.cpp's test vectors and an excerpt of a real corpus.
func limitTexts(t testing.TB) []string {
	var texts []string
	for _, c := range readVocabCases(t, "ggml-vocab-llama-spm.gguf") {
		texts = append(texts, c.text)
	}
	corpus, err := os.ReadFile(testdata.Path(t, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return append(texts, string(corpus[:20000]), "日本語のテキスト。句読点、そして改行\n二行目！")
}

// TestEncodeMaxTokensSame checks that a limit the text fits in changes nothing, and that a
// limit it does not fit in gives more tokens than the limit.
func TestEncodeMaxTokensSame(t *testing.T) {
	texts := limitTexts(t)
	for name, tok := range limitTokenizers(t) {
		for _, text := range texts {
			opt := EncodeOptions{AddSpecial: true, ParseSpecial: true}
			full := tok.Encode(text, opt)
			opt.MaxTokens = len(full)
			if got := tok.Encode(text, opt); !slices.Equal(got, full) {
				t.Fatalf("%s: Encode(%.40q) with MaxTokens %d: %d tokens differ from the %d of the full encoding", name, text, len(full), len(got), len(full))
			}
			if len(full) < 2 {
				continue
			}
			opt.MaxTokens = len(full) / 2
			if got := tok.Encode(text, opt); len(got) <= opt.MaxTokens {
				t.Fatalf("%s: Encode(%.40q) with MaxTokens %d gave %d tokens: the text of %d tokens looks as if it fit", name, text, opt.MaxTokens, len(got), len(full))
			}
		}
	}
}

// TestSPMChunksSame checks that SentencePiece text cut at its safe places, in chunks of any
// size, encodes to the tokens of the whole text.
func TestSPMChunksSame(t *testing.T) {
	texts := limitTexts(t)
	for name, tok := range limitTokenizers(t) {
		m, ok := tok.enc.(*spmModel)
		if !ok {
			continue
		}
		for _, text := range texts {
			escaped := strings.ReplaceAll(" "+text, " ", spaceMarker)
			want := m.encodeText(escaped, nil)
			for _, chunk := range []int{1, 7, 64, 1000} {
				if got := m.encodeChunks(escaped, nil, math.MaxInt, chunk); !slices.Equal(got, want) {
					t.Fatalf("%s: %.40q in chunks of %d: %v, want %v", name, text, chunk, got[:min(len(got), 20)], want[:min(len(want), 20)])
				}
			}
		}
	}
}

// TestEncodeMaxTokensStopsEarly encodes 4 MiB of text with a limit of 1024 tokens: every
// kind of tokenizer stops soon after the limit, allocating a small multiple of the text
// (its normalized and escaped copies) where the full encoding takes many times more.
func TestEncodeMaxTokensStopsEarly(t *testing.T) {
	corpus, err := os.ReadFile(testdata.Path(t, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat(string(corpus), 1+(4<<20)/len(corpus))[:4<<20]
	const limit = 1024
	for name, tok := range limitTokenizers(t) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got := tok.Encode(text, EncodeOptions{AddSpecial: true, MaxTokens: limit})
		runtime.ReadMemStats(&after)
		if len(got) <= limit || len(got) > limit+spmChunkBytes {
			t.Errorf("%s: %d tokens with MaxTokens %d: want more than the limit, by less than %d", name, len(got), limit, spmChunkBytes)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(text)) {
			t.Errorf("%s: encoding up to the limit allocated %d bytes, more than 4x the %d bytes of text", name, alloc, len(text))
		}
	}
}

// FuzzEncodeMaxTokens checks any text against every limit's contract: the full encoding
// when it fits, more tokens than the limit when it does not; and SentencePiece chunks of any
// size against the whole text.
func FuzzEncodeMaxTokens(f *testing.F) {
	for _, s := range fuzzTexts {
		f.Add(s, uint8(3), uint8(2))
	}
	f.Add("a b。c，d\ne▁f", uint8(1), uint8(1))
	toks := limitTokenizers(f)
	f.Fuzz(func(t *testing.T, s string, limit, chunk uint8) {
		for name, tok := range toks {
			full := tok.Encode(s, EncodeOptions{AddSpecial: true})
			got := tok.Encode(s, EncodeOptions{AddSpecial: true, MaxTokens: int(limit) + 1})
			switch {
			case len(full) <= int(limit)+1 && !slices.Equal(got, full):
				t.Fatalf("%s: %q fits in %d tokens but gave %v, want %v", name, s, int(limit)+1, got, full)
			case len(full) > int(limit)+1 && len(got) <= int(limit)+1:
				t.Fatalf("%s: %q of %d tokens gave %d with MaxTokens %d", name, s, len(full), len(got), int(limit)+1)
			}
			if m, ok := tok.enc.(*spmModel); ok {
				escaped := strings.ReplaceAll(s, " ", spaceMarker)
				if got, want := m.encodeChunks(escaped, nil, math.MaxInt, int(chunk)), m.encodeText(escaped, nil); !slices.Equal(got, want) {
					t.Fatalf("%s: %q in chunks of %d: %v, want %v", name, s, chunk, got, want)
				}
			}
		}
	})
}
