package llama2c

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestOpenVocabTok512(t *testing.T) {
	path := testdata.Path(t, "models/stories260K/tok512.bin")
	v, err := OpenVocab(path, 512)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Pieces) != 512 || len(v.Scores) != 512 {
		t.Fatalf("%d pieces, %d scores; want 512", len(v.Pieces), len(v.Scores))
	}
	if v.MaxTokenLen != 7 {
		t.Errorf("max token length %d, want 7", v.MaxTokenLen)
	}
	// llama2.c's tokenizer export: ids 0..2 are <unk>, <s> (as "\n<s>\n") and </s>, then
	// the 256 byte tokens <0x00>..<0xFF>.
	if v.Pieces[0] != "<unk>" || !strings.Contains(v.Pieces[1], "<s>") || !strings.Contains(v.Pieces[2], "</s>") {
		t.Errorf("special pieces %q %q %q", v.Pieces[0], v.Pieces[1], v.Pieces[2])
	}
	if v.Pieces[3] != "<0x00>" || v.Pieces[3+255] != "<0xFF>" {
		t.Errorf("byte pieces %q .. %q", v.Pieces[3], v.Pieces[258])
	}
	for i, p := range v.Pieces {
		if len(p) > v.MaxTokenLen {
			t.Errorf("piece %d %q longer than max %d", i, p, v.MaxTokenLen)
		}
	}
	// Reading to EOF gives the same vocabulary.
	all, err := OpenVocab(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all.Pieces, v.Pieces) || !slices.Equal(all.Scores, v.Scores) {
		t.Error("reading to EOF gives a different vocabulary")
	}
	// Writing reproduces the file exactly.
	var buf bytes.Buffer
	if err := WriteVocab(&buf, v); err != nil {
		t.Fatal(err)
	}
	orig, _ := readAll(path)
	if !bytes.Equal(buf.Bytes(), orig) {
		t.Error("rewritten tokenizer differs from the original")
	}
}

func TestVocabErrors(t *testing.T) {
	var good bytes.Buffer
	WriteVocab(&good, &Vocab{MaxTokenLen: 3, Pieces: []string{"a", "bc", "def"}, Scores: []float32{0, -1, -2.5}})
	g := good.Bytes()
	u32 := func(vs ...int32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	tests := []struct {
		name string
		data []byte
		n    int
		want string
	}{
		{"empty", nil, -1, "max_token_length"},
		{"negative max", u32(-1), -1, "max_token_length -1"},
		{"too few tokens", g, 4, "token 3"},
		{"truncated text", g[:len(g)-1], 3, "token 2: 3 bytes"},
		{"truncated text eof", g[:len(g)-1], -1, "truncated"},
		{"truncated length", g[:len(g)-5], -1, "token 2: length"},
		{"negative length", append(u32(3, 0), u32(-5)...), -1, "length -5"},
		{"huge length", append(u32(3, 0), u32(math.MaxInt32)...), -1, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVocab(tt.data, tt.n)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	v, err := ParseVocab(g, -1)
	if err != nil || !slices.Equal(v.Pieces, []string{"a", "bc", "def"}) || v.Scores[2] != -2.5 {
		t.Fatalf("good vocabulary: %+v, %v", v, err)
	}
	if v, err := ParseVocab(g, 2); err != nil || len(v.Pieces) != 2 {
		t.Fatalf("first two tokens: %+v, %v", v, err)
	}
}

func FuzzParseVocab(f *testing.F) {
	var good bytes.Buffer
	WriteVocab(&good, &Vocab{MaxTokenLen: 3, Pieces: []string{"a", "bc", "", "\xff"}, Scores: []float32{0, -1, 2, 3}})
	f.Add(good.Bytes(), -1)
	f.Add(good.Bytes(), 4)
	f.Add(good.Bytes()[:9], 2)
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f}, 1<<30)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		v, err := ParseVocab(data, n)
		if err != nil {
			return
		}
		if len(v.Pieces) != len(v.Scores) || (n >= 0 && len(v.Pieces) != n) {
			t.Fatalf("%d pieces, %d scores for n=%d", len(v.Pieces), len(v.Scores), n)
		}
		var buf bytes.Buffer
		if err := WriteVocab(&buf, v); err != nil {
			t.Fatal(err)
		}
		if n < 0 && !bytes.Equal(buf.Bytes(), data) {
			t.Fatal("round trip differs")
		}
	})
}

func readAll(path string) ([]byte, error) { return os.ReadFile(path) }
