package hfconfig

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestQwen3TokenizerConfig(t *testing.T) {
	tc, err := ReadTokenizerConfig(testdata.Path(t, "tokenizers/qwen3/tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if tc.EOSToken != "<|im_end|>" || tc.PadToken != "<|endoftext|>" || tc.BOSToken != "" || tc.UnkToken != "" {
		t.Errorf("special tokens: bos %q eos %q pad %q unk %q", tc.BOSToken, tc.EOSToken, tc.PadToken, tc.UnkToken)
	}
	if tc.AddBOSToken == nil || *tc.AddBOSToken || tc.AddEOSToken != nil {
		t.Errorf("add_bos_token %v add_eos_token %v", tc.AddBOSToken, tc.AddEOSToken)
	}
	if tc.ModelMaxLength != 131072 || tc.TokenizerClass != "Qwen2Tokenizer" {
		t.Errorf("model_max_length %d, class %q", tc.ModelMaxLength, tc.TokenizerClass)
	}
	if !strings.HasPrefix(tc.ChatTemplate, "{%- if tools %}") || !strings.Contains(tc.ChatTemplate, "<|im_start|>assistant") {
		t.Errorf("chat template starts %.40q", tc.ChatTemplate)
	}
	out, err := tc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseTokenizerConfig(out)
	if err != nil || !reflect.DeepEqual(again, tc) {
		t.Fatalf("round trip: %v", err)
	}
}

func TestTokenizerConfigForms(t *testing.T) {
	data := []byte(`{
  "add_bos_token": true,
  "add_eos_token": false,
  "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": false},
  "eos_token": {"content": "</s>", "rstrip": false},
  "pad_token": null,
  "unk_token": "<unk>",
  "model_max_length": 1000000000000000019884624838656,
  "chat_template": [
    {"name": "default", "template": "{{ messages }}"},
    {"name": "tool_use", "template": "{{ tools }}"}
  ]
}`)
	tc, err := ParseTokenizerConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &TokenizerConfig{
		ChatTemplate:  "{{ messages }}",
		ChatTemplates: map[string]string{"default": "{{ messages }}", "tool_use": "{{ tools }}"},
		BOSToken:      "<s>", EOSToken: "</s>", UnkToken: "<unk>",
		AddBOSToken: ptr(true), AddEOSToken: ptr(false),
	}
	if !reflect.DeepEqual(tc, want) {
		t.Fatalf("got %+v\nwant %+v", tc, want)
	}
	out, _ := tc.Marshal()
	if again, err := ParseTokenizerConfig(out); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip: %+v %v\n%s", again, err, out)
	}
	// A list without "default" leaves ChatTemplate empty but keeps the named ones.
	tc, err = ParseTokenizerConfig([]byte(`{"chat_template":[{"name":"rag","template":"x"}]}`))
	if err != nil || tc.ChatTemplate != "" || tc.ChatTemplates["rag"] != "x" {
		t.Errorf("no default: %+v %v", tc, err)
	}
	for _, bad := range []string{
		`{"chat_template": 3}`,
		`{"chat_template": [{"name": "default"}]}`,
		`{"bos_token": {"lstrip": true}}`,
		`{"eos_token": 5}`,
		`{"add_bos_token": "yes"}`,
		`{`,
	} {
		if _, err := ParseTokenizerConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") {
			t.Errorf("%s: error %v", bad, err)
		}
	}
}

func FuzzParseTokenizerConfig(f *testing.F) {
	f.Add([]byte(`{"bos_token":{"content":"<s>"},"eos_token":"</s>","chat_template":"{{x}}","model_max_length":4096}`))
	f.Add([]byte(`{"chat_template":[{"name":"default","template":"a"}],"add_bos_token":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tc, err := ParseTokenizerConfig(data)
		if err != nil {
			return
		}
		out, err := tc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseTokenizerConfig(out); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
}
