package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestLoRAFlags: vLLM's `--lora-modules a=x b=y` (several values after the flag), the
// JSON form and a positional model after them; bad entries and limits are refused.
func TestLoRAFlags(t *testing.T) {
	fs := newFlags("serve", "")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := ef.parse(fs, []string{"--lora-modules", "sql=/a/sql", `{"name": "chat", "path": "/b/chat.gguf"}`, "m.gguf", "--max-loras", "3"}); err != nil {
		t.Fatal(err)
	}
	opt, err := ef.options()
	if err != nil {
		t.Fatal(err)
	}
	want := []kvasir.LoRAModule{{Name: "sql", Path: "/a/sql"}, {Name: "chat", Path: "/b/chat.gguf"}}
	if !slices.Equal(opt.LoRAModules, want) || ef.model != "m.gguf" || opt.MaxLoRAs != 3 || opt.MaxLoRARank != kvasir.DefaultMaxLoRARank {
		t.Fatalf("modules %v model %q max-loras %d rank %d", opt.LoRAModules, ef.model, opt.MaxLoRAs, opt.MaxLoRARank)
	}
	for _, args := range [][]string{{"--lora-modules", "noequals"}, {"--lora-modules", `{"name": "x"}`}} {
		fs := newFlags("serve", "")
		ef := addEngineFlags(fs, allEngineFlags)
		if err := ef.parse(fs, args); err == nil || !strings.Contains(err.Error(), "lora module") {
			t.Errorf("%v: %v", args, err)
		}
	}
	fs = newFlags("serve", "")
	ef = addEngineFlags(fs, allEngineFlags)
	err = ef.parse(fs, []string{"--max-lora-rank", "0"})
	if err == nil {
		_, err = ef.options()
	}
	if err == nil || !strings.Contains(err.Error(), "max-lora-rank") {
		t.Errorf("rank 0: %v", err)
	}
}
