package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestVocabFromLlama3Files(t *testing.T) {
	tok := loadLlama3(t)
	v := tok.Vocab()
	if len(v.Tokens) != 128256 {
		t.Fatalf("%d tokens, want 128256", len(v.Tokens))
	}
	if v.Model != "gpt2" || v.Pre != "llama-bpe" || !v.AddBOS || v.AddEOS {
		t.Errorf("model %q pre %q addBOS %v addEOS %v", v.Model, v.Pre, v.AddBOS, v.AddEOS)
	}
	if v.BOS != 128000 || v.EOS != 128001 || v.EOT != 128009 {
		t.Errorf("BOS %d EOS %d EOT %d", v.BOS, v.EOS, v.EOT)
	}
	for id, want := range map[int]string{
		128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128002: "<|reserved_special_token_0|>",
		128004: "<|finetune_right_pad_id|>", 128006: "<|start_header_id|>", 128007: "<|end_header_id|>",
		128008: "<|eom_id|>", 128009: "<|eot_id|>", 128010: "<|python_tag|>",
		128011: "<|reserved_special_token_3|>", 128255: "<|reserved_special_token_247|>",
	} {
		if v.Tokens[id] != want || v.Types[id] != TypeControl {
			t.Errorf("token %d = %q (type %d), want control %q", id, v.Tokens[id], v.Types[id], want)
		}
	}
	if v.Tokens[0] != "!" || v.Types[0] != TypeNormal || len(v.Merges) != 280147 {
		t.Errorf("token 0 %q type %d, %d merges", v.Tokens[0], v.Types[0], len(v.Merges))
	}

	// A chat turn, with BOS and special tokens parsed ("user" = 882, "\n\n" = 271, "Hi" = 13347).
	text := "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
	got := tok.Encode(text, EncodeOptions{AddSpecial: true, ParseSpecial: true})
	want := []int{128000, 128006, 882, 128007, 271, 13347, 128009}
	if !slices.Equal(got, want) {
		t.Errorf("chat turn: got %v, want %v", got, want)
	}
	if back := tok.Decode(got, false); back != "<|begin_of_text|>"+text {
		t.Errorf("decode: %q", back)
	}
}

func TestVocabFromLlama3FilesErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.bpe", "#version: 0.2\nĠ t\n")
	cases := []struct{ name, enc, bpe string }{
		{"missing encoder", filepath.Join(dir, "nope.json"), good},
		{"bad json", write("bad.json", "{"), good},
		{"empty encoder", write("empty.json", "{}"), good},
		{"negative id", write("neg.json", `{"a": -1}`), good},
		{"duplicate id", write("dup.json", `{"a": 0, "b": 0}`), good},
		{"bad merge", write("ok.json", `{"a": 0}`), write("bad.bpe", "a b\nnospace\n")},
		{"missing merges", write("ok2.json", `{"a": 0}`), filepath.Join(dir, "nope.bpe")},
	}
	for _, c := range cases {
		if _, err := VocabFromLlama3Files(c.enc, c.bpe); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	v, err := VocabFromLlama3Files(write("holes.json", `{"Ġ": 0, "t": 2}`), good)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 128256 || v.Tokens[1] != "[PAD1]" || v.Types[1] != TypeUnused || len(v.Merges) != 1 {
		t.Errorf("holes: %d tokens, token 1 %q type %d, merges %q", len(v.Tokens), v.Tokens[1], v.Types[1], v.Merges)
	}
}
