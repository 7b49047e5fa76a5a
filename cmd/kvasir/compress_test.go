package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/promptcompress"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestCompressParts(t *testing.T) {
	for _, tc := range []struct {
		instruction, prompt, question string
		want                          []promptcompress.Part
	}{
		{"", "One. Two. Three?", "", []promptcompress.Part{{Text: "One. Two. "}, {Text: "Three?", Keep: true}}},
		{"Be brief.", "One. Two.", " Why?", []promptcompress.Part{{Text: "Be brief.", Keep: true}, {Text: "One. Two."}, {Text: " Why?", Keep: true}}},
		{"", "just one", "", []promptcompress.Part{{Text: "just one", Keep: true}}},
	} {
		got := compressParts(tc.instruction, tc.prompt, tc.question)
		if len(got) != len(tc.want) {
			t.Errorf("compressParts(%q, %q, %q) = %+v, want %+v", tc.instruction, tc.prompt, tc.question, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("compressParts(%q, %q, %q) = %+v, want %+v", tc.instruction, tc.prompt, tc.question, got, tc.want)
				break
			}
		}
	}
}

// TestCompressCommand runs kvasir compress on real text with the trained draft: --json
// counts about half the tokens kept with the question whole at the end, the plain output is
// the same prompt, and a bad rate is refused.
func TestCompressCommand(t *testing.T) {
	model := testdata.Path(t, "models/trained/draft")
	text, err := os.ReadFile(testdata.Path(t, "corpus/tinystories_excerpt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(prompt, text[:1200], 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-m", model, "-f", prompt, "--rate", "0.5", "--question", " What did the crab say?", "--threads", "2"}
	var out compressOutput
	if err := json.Unmarshal([]byte(captureStdout(t, func() error { return runCompress(append(args, "--json")) })), &out); err != nil {
		t.Fatal(err)
	}
	if out.OriginalTokens < 200 || out.KeptTokens < out.OriginalTokens*4/10 || out.KeptTokens > out.OriginalTokens*6/10 {
		t.Errorf("kept %d of %d tokens at rate 0.5", out.KeptTokens, out.OriginalTokens)
	}
	if !strings.HasSuffix(out.Prompt, " What did the crab say?") || out.Rate != 0.5 {
		t.Errorf("output %+v: want the question last and the rate", out)
	}
	if plain := captureStdout(t, func() error { return runCompress(args) }); plain != out.Prompt {
		t.Errorf("plain output %q, --json prompt %q", plain, out.Prompt)
	}
	var err2 error
	captureStderr(t, func() { err2 = runCompress([]string{"-m", model, "-f", prompt, "--rate", "1.5"}) })
	if err2 == nil || !strings.Contains(err2.Error(), "--rate") {
		t.Errorf("rate 1.5: %v, want a refusal naming --rate", err2)
	}
}
