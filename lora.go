package kvasir

import (
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/lora"
)

// LoRAAdapter is a LoRA adapter loaded into an engine (Engine.LoRA): set it as a
// Request's Adapter to run the request with it.
type LoRAAdapter = lora.Adapter

// The defaults of Options.MaxLoRAs and Options.MaxLoRARank (vLLM's).
const (
	DefaultMaxLoRAs    = 1
	DefaultMaxLoRARank = 16
)

// LoRAModule names an adapter to load at start (vLLM's --lora-modules name=path): a PEFT
// folder (adapter_config.json, adapter_model.safetensors) or a llama.cpp GGUF LoRA file.
type LoRAModule struct {
	Name, Path string
}

// ParseLoRAModule reads one --lora-modules entry, name=path.
func ParseLoRAModule(s string) (LoRAModule, error) {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" {
		return LoRAModule{}, fmt.Errorf("lora module %q: want name=path", s)
	}
	return LoRAModule{Name: name, Path: path}, nil
}

// loraLimits returns the adapter slots and rank bound opt asks for (defaults filled in);
// ok is false when opt asks for no LoRA at all.
func loraLimits(opt Options) (slots, rank int, ok bool) {
	if !opt.EnableLoRA && len(opt.LoRAModules) == 0 {
		return 0, 0, false
	}
	slots, rank = opt.MaxLoRAs, opt.MaxLoRARank
	if slots <= 0 {
		slots = DefaultMaxLoRAs
	}
	if rank <= 0 {
		rank = DefaultMaxLoRARank
	}
	return slots, rank, true
}

// enableLoRA reserves the model's adapter slots and loads opt's modules into a new
// registry (nil when opt asks for no LoRA).
func enableLoRA(l *Loaded, opt Options) (*lora.Registry, error) {
	slots, rank, ok := loraLimits(opt)
	if !ok {
		return nil, nil
	}
	if err := l.m.EnableLoRA(slots, rank); err != nil {
		return nil, fmt.Errorf("open %s: %w", l.fm.Path, err)
	}
	reg := lora.NewRegistry(l.fm.Config, rank)
	for _, mod := range opt.LoRAModules {
		if _, err := reg.Load(mod.Name, mod.Path); err != nil {
			return nil, fmt.Errorf("open %s: lora module %s: %w", l.fm.Path, mod.Name, err)
		}
	}
	return reg, nil
}

// checkAdapter refuses, before it reaches a step, a request adapter the engine cannot run:
// LoRA off, or an adapter made for another base or of a rank above the slots'.
func (e *Engine) checkAdapter(a *LoRAAdapter) error {
	if a == nil {
		return nil
	}
	if e.loras == nil {
		return &ParamError{Param: "model", Message: fmt.Sprintf("adapter %q: the engine was started without LoRA (Options.EnableLoRA, --enable-lora)", a.Name)}
	}
	if err := a.Fits(e.l.fm.Config, e.loras.MaxRank()); err != nil {
		return &ParamError{Param: "model", Message: err.Error()}
	}
	return nil
}

// LoRAEnabled reports whether the engine serves LoRA adapters (Options.EnableLoRA or
// LoRAModules).
func (e *Engine) LoRAEnabled() bool { return e.loras != nil }

// MaxLoRAs returns how many adapters a step may use (0 without LoRA).
func (e *Engine) MaxLoRAs() int { return e.l.m.LoRASlots() }

// MaxLoRARank returns the highest adapter rank the engine takes (0 without LoRA).
func (e *Engine) MaxLoRARank() int {
	if e.loras == nil {
		return 0
	}
	return e.loras.MaxRank()
}

// LoRA returns the loaded adapter of that name.
func (e *Engine) LoRA(name string) (*LoRAAdapter, bool) {
	if e.loras == nil {
		return nil, false
	}
	return e.loras.Get(name)
}

// LoRAs returns the loaded adapters in load order.
func (e *Engine) LoRAs() []*LoRAAdapter {
	if e.loras == nil {
		return nil
	}
	return e.loras.List()
}

// LoadLoRA reads the adapter at path (a PEFT folder or a GGUF LoRA file) and serves it as
// name. It fails with a clear error for a name in use (ErrLoRAExists), a file that is
// not an adapter, a rank above MaxLoRARank, or shapes that are not the model's.
func (e *Engine) LoadLoRA(name, path string) (*LoRAAdapter, error) {
	if e.loras == nil {
		return nil, fmt.Errorf("lora: the engine was started without LoRA (Options.EnableLoRA, --enable-lora)")
	}
	if name == e.ModelName() {
		return nil, fmt.Errorf("lora %q: %w (the base model's)", name, lora.ErrExists)
	}
	return e.loras.Load(name, path)
}

// UnloadLoRA stops serving the adapter of that name (ErrLoRANotFound when none). Requests
// that run with it finish with it; new ones cannot name it.
func (e *Engine) UnloadLoRA(name string) error {
	if e.loras == nil {
		return fmt.Errorf("lora %q: %w", name, lora.ErrNotFound)
	}
	return e.loras.Unload(name)
}

// Errors of LoadLoRA and UnloadLoRA (test with errors.Is).
var (
	ErrLoRAExists   = lora.ErrExists
	ErrLoRANotFound = lora.ErrNotFound
)
