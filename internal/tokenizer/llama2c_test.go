package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/llama2c"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// runcEncode is a test oracle written after llama2.c run.c's encode(): a dummy " " token,
// one token per UTF-8 character or its bytes (+3 offset), then repeatedly merge the adjacent
// pair whose concatenation is in the vocab with the highest score (leftmost on ties).
func runcEncode(pieces []string, scores []float32, text string, bos bool) []int {
	ids := make(map[string]int, len(pieces))
	for i, p := range pieces {
		if _, ok := ids[p]; !ok {
			ids[p] = i
		}
	}
	var toks []int
	if bos {
		toks = append(toks, 1)
	}
	if text != "" {
		toks = append(toks, ids[" "])
	}
	for i := 0; i < len(text); {
		n := 1
		for n < 4 && i+n < len(text) && text[i+n]&0xC0 == 0x80 {
			n++
		}
		if id, ok := ids[text[i:i+n]]; ok {
			toks = append(toks, id)
		} else {
			for j := i; j < i+n; j++ {
				toks = append(toks, int(text[j])+3)
			}
		}
		i += n
	}
	for {
		best, bestID, bestAt := float32(-1e10), -1, -1
		for i := 0; i+1 < len(toks); i++ {
			if id, ok := ids[pieces[toks[i]]+pieces[toks[i+1]]]; ok && scores[id] > best {
				best, bestID, bestAt = scores[id], id, i
			}
		}
		if bestAt < 0 {
			break
		}
		toks[bestAt] = bestID
		toks = append(toks[:bestAt+1], toks[bestAt+2:]...)
	}
	return toks
}

func loadTok512(t *testing.T) (*llama2c.Vocab, *Tokenizer) {
	t.Helper()
	lv, err := llama2c.OpenVocab(testdata.Path(t, "models/stories260K/tok512.bin"), 512)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(VocabFromLlama2c(lv.Pieces, lv.Scores))
	if err != nil {
		t.Fatal(err)
	}
	return lv, tok
}

func tinyStoriesLines(t *testing.T, n int) []string {
	t.Helper()
	b, err := os.ReadFile(testdata.Path(t, "corpus/tinystories_excerpt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
		if len(lines) == n {
			break
		}
	}
	return lines
}

func TestLlama2cVocab(t *testing.T) {
	lv, tok := loadTok512(t)
	v := tok.Vocab()
	if v.BOS != 1 || v.EOS != 2 || v.UNK != 0 || !v.AddBOS || !v.AddSpacePrefix {
		t.Fatalf("specials: bos %d eos %d unk %d addBOS %v prefix %v", v.BOS, v.EOS, v.UNK, v.AddBOS, v.AddSpacePrefix)
	}
	if v.Tokens[1] != "<s>" || v.Tokens[2] != "</s>" || v.TypeOf(1) != TypeControl || v.TypeOf(0) != TypeUnknown {
		t.Fatalf("control tokens: %q %q", v.Tokens[1], v.Tokens[2])
	}
	if v.TypeOf(3+'\n') != TypeByte || string(tok.TokenBytes(3+'\n')) != "\n" {
		t.Fatalf("byte token <0x0A>: type %d bytes %q", v.TypeOf(13), tok.TokenBytes(13))
	}
	if got := string(tok.TokenBytes(259)); got != lv.Pieces[259] {
		t.Fatalf("TokenBytes(259) = %q, want %q", got, lv.Pieces[259])
	}
}

// TestLlama2cMatchesRunCAndGGUF: tok512.bin, run.c's algorithm and the vocab embedded in
// stories260K.gguf (converted by llama.cpp) all tokenize TinyStories text the same way.
func TestLlama2cMatchesRunCAndGGUF(t *testing.T) {
	lv, tok := loadTok512(t)
	gtok := loadGGUFTokenizer(t, "models/stories260K/stories260K.gguf")
	texts := append(tinyStoriesLines(t, 40),
		"Once upon a time", "", " ", "  two  spaces ", "Héllo wörld — ünïcode ✓ 日本語 🙂",
		"line\nbreaks\n\n", "tab\there", "x<s>y</s>", "\x00\x01\xff")
	opt := EncodeOptions{AddSpecial: true}
	for _, text := range texts {
		want := runcEncode(lv.Pieces, lv.Scores, text, true)
		got := tok.Encode(text, opt)
		if !equalIDs(got, want) {
			t.Errorf("tok512 %q:\n got %v\nwant %v (run.c)", text, got, want)
		}
		if g := gtok.Encode(text, opt); !equalIDs(g, want) {
			t.Errorf("gguf %q:\n got %v\nwant %v (run.c)", text, g, want)
		}
		if dec := tok.Decode(got, true); dec != text && !strings.Contains(text, "<s>") {
			t.Errorf("round trip %q -> %q", text, dec)
		}
	}
}

// TestDecodeRunCGreedy: the detokenized llama2.c greedy run is byte-exact run.c's output.
func TestDecodeRunCGreedy(t *testing.T) {
	_, tok := loadTok512(t)
	var ref struct {
		Tokens []int `json:"tokens"`
	}
	b, err := os.ReadFile(testdata.Path(t, "models/stories260K/ref_greedy_tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(testdata.Path(t, "models/stories260K/ref_runc_greedy200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Tokens) < 100 || ref.Tokens[0] != 1 {
		t.Fatalf("unexpected reference tokens %v", ref.Tokens[:min(5, len(ref.Tokens))])
	}
	got := tok.Decode(ref.Tokens, true)
	if got != strings.TrimSuffix(string(want), "\n") {
		t.Fatalf("decode:\n got %q\nwant %q", got, want)
	}
	d := NewDetokenizer(tok, true)
	var sb strings.Builder
	for _, id := range ref.Tokens {
		sb.WriteString(d.Add(id))
	}
	sb.WriteString(d.Flush())
	if sb.String() != got {
		t.Fatalf("streamed %q, decoded %q", sb.String(), got)
	}
}
