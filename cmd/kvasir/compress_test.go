package main

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/promptcompress"
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
