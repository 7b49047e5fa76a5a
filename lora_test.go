package kvasir

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestLoRAAPI: the Go API's adapters on stories260K: LoRAModules at start and LoadLoRA
// later, each request running with the adapter it names, unload and the errors (a name in
// use, an unknown name, an adapter of another base or rank given directly, LoRA off).
func TestLoRAAPI(t *testing.T) {
	p, tok := testdata.Path(t, "models/stories260K/stories260K.bin"), testdata.Path(t, "models/stories260K/tok512.bin")
	dir := t.TempDir()
	base := Options{Tokenizer: tok, Threads: 2, KVCacheMemory: 4 << 20}
	plain, err := Open(p, base)
	if err != nil {
		t.Fatal(err)
	}
	c := plain.Loaded().File().Config
	a8 := filepath.Join(dir, "a8")
	if err := lora.WritePEFT(a8, lora.Random(c, 8, 16, []lora.Target{lora.Q, lora.V, lora.Down}, 0.1, 1), c, true); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(dir, "g.gguf")
	if err := lora.WriteGGUF(g, lora.Random(c, 4, 8, []lora.Target{lora.O}, 0.2, 2), c); err != nil {
		t.Fatal(err)
	}
	gen := func(e *Engine, a *LoRAAdapter) (string, error) {
		ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 24}, Adapter: a})
		if err != nil {
			return "", err
		}
		text := ""
		for o := range ch {
			text += o.Text
		}
		return text, nil
	}
	want, err := gen(plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	stray := lora.Random(c, 4, 8, []lora.Target{lora.Q}, 0.1, 3)
	if _, err := gen(plain, stray); err == nil || !strings.Contains(err.Error(), "without LoRA") {
		t.Errorf("adapter on an engine without LoRA: %v", err)
	}
	plain.Close()

	opt := base
	opt.LoRAModules, opt.MaxLoRAs, opt.MaxLoRARank = []LoRAModule{{Name: "a8", Path: a8}}, 2, 8
	e, err := Open(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.LoRAEnabled() || e.MaxLoRAs() != 2 || e.MaxLoRARank() != 8 || len(e.LoRAs()) != 1 {
		t.Fatalf("enabled %v, %d slots of rank %d, %d adapters", e.LoRAEnabled(), e.MaxLoRAs(), e.MaxLoRARank(), len(e.LoRAs()))
	}
	if got, err := gen(e, nil); err != nil || got != want {
		t.Errorf("base on a LoRA engine: %q, %v; want %q", got, err, want)
	}
	ad, ok := e.LoRA("a8")
	if !ok {
		t.Fatal("a8 not loaded")
	}
	withA8, err := gen(e, ad)
	if err != nil || withA8 == want {
		t.Errorf("a8: %q, %v (the base's %q)", withA8, err, want)
	}
	if _, err := e.LoadLoRA("a8", g); !errors.Is(err, ErrLoRAExists) {
		t.Errorf("load of a name in use: %v", err)
	}
	ag, err := e.LoadLoRA("g", g)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := gen(e, ag); err != nil || got == want || got == withA8 {
		t.Errorf("g: %q, %v", got, err)
	}
	if err := e.UnloadLoRA("a8"); err != nil {
		t.Fatal(err)
	}
	if err := e.UnloadLoRA("a8"); !errors.Is(err, ErrLoRANotFound) {
		t.Errorf("second unload: %v", err)
	}
	if _, ok := e.LoRA("a8"); ok {
		t.Error("a8 still named after its unload")
	}
	var pe *ParamError
	if _, err := gen(e, lora.Random(c, 16, 8, []lora.Target{lora.Q}, 0.1, 4)); !errors.As(err, &pe) || !strings.Contains(err.Error(), "rank 16 exceeds --max-lora-rank 8") {
		t.Errorf("adapter of a rank above the slots': %v", err)
	}
}
