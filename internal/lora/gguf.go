package lora

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// The metadata keys of a llama.cpp LoRA file (convert_lora_to_gguf.py).
const (
	keyType      = "general.type"
	keyAdapter   = "adapter.type"
	keyLoRAAlpha = "adapter.lora.alpha"
)

// OpenGGUF reads a llama.cpp LoRA adapter (general.type "adapter", adapter.type "lora",
// tensors blk.N.<projection>.weight.lora_a and .lora_b) for a base model of config c.
// maxRank (0: no bound) limits the rank.
func OpenGGUF(path string, c format.Config, maxRank int) (*Adapter, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	a, err := fromGGUF(f, c, maxRank)
	if err != nil {
		return nil, fmt.Errorf("lora %s: %w", path, err)
	}
	a.Path = path
	return a, nil
}

// fromGGUF reads the adapter held in a parsed GGUF file.
func fromGGUF(f *gguf.File, c format.Config, maxRank int) (*Adapter, error) {
	if t, _ := f.GetString(keyType); t != "adapter" {
		return nil, fmt.Errorf("%s is %q: not a GGUF adapter file", keyType, t)
	}
	if t, _ := f.GetString(keyAdapter); t != "lora" {
		return nil, fmt.Errorf("%s is %q: only LoRA adapters are served", keyAdapter, t)
	}
	arch := f.Architecture()
	if arch != "" && c.Arch != "" && arch != c.Arch {
		return nil, fmt.Errorf("adapter for architecture %q, the base model is %q", arch, c.Arch)
	}
	alpha := 0.0
	if v, ok := f.Get(keyLoRAAlpha); ok {
		if alpha, ok = v.Float64(); !ok || math.IsNaN(alpha) || math.IsInf(alpha, 0) {
			return nil, fmt.Errorf("%s: %v is not a number", keyLoRAAlpha, v.Any())
		}
	}
	a := &Adapter{Alpha: alpha, Layers: make([][NumTargets]*Pair, c.Layers)}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		l, t, isA, err := ggufTensorName(ti.Name, c.Layers)
		if err != nil {
			return nil, err
		}
		if len(ti.Dims) != 2 || !ti.Type.Known() {
			return nil, fmt.Errorf("tensor %q: %s with %d dimensions: want a matrix", ti.Name, ti.Type, len(ti.Dims))
		}
		data, err := f.TensorData(ti)
		if err != nil {
			return nil, err
		}
		// GGUF lists dimensions innermost first: ne = {cols, rows}.
		shape := []int{int(ti.Dims[1]), int(ti.Dims[0])}
		if shape[0] <= 0 || shape[1] <= 0 || shape[0] > 1<<24 || shape[1] > 1<<24 {
			return nil, fmt.Errorf("tensor %q: shape %v", ti.Name, shape)
		}
		vals := make([]float32, shape[0]*shape[1])
		if err := quant.Dequantize(ti.Type, data, vals); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
		if err := a.place(l, t, isA, shape, vals); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
	}
	err := a.finish(c, func(r int) float32 {
		if alpha == 0 {
			return 1 // llama.cpp: no alpha, no scaling
		}
		return float32(alpha / float64(r))
	}, maxRank)
	if err != nil {
		return nil, err
	}
	if arch == "llama" && c.RopeStyle == format.RopeNeox {
		// llama.cpp permutes a Llama's q and k rows (base and adapter alike) into the
		// interleaved order; a base read from Hugging Face files keeps the NeoX one.
		a.permuteQK(c, false)
	}
	return a, nil
}

// ggufTensorName parses blk.N.<projection>.weight.lora_a (or .lora_b).
func ggufTensorName(name string, layers int) (l int, t Target, isA bool, err error) {
	rest, ok := strings.CutPrefix(name, "blk.")
	var num, proj, suffix string
	if ok {
		num, rest, ok = strings.Cut(rest, ".")
	}
	if ok {
		proj, suffix, ok = strings.Cut(rest, ".weight.lora_")
	}
	if !ok || (suffix != "a" && suffix != "b") {
		return 0, 0, false, fmt.Errorf("tensor %q: not a LoRA tensor (blk.N.<projection>.weight.lora_a or .lora_b)", name)
	}
	l, err = strconv.Atoi(num)
	if err != nil || l < 0 || l >= layers {
		return 0, 0, false, fmt.Errorf("tensor %q: layer %s outside the base's %d", name, num, layers)
	}
	for i, n := range ggufNames {
		if n == proj {
			return l, Target(i), suffix == "a", nil
		}
	}
	return 0, 0, false, fmt.Errorf("tensor %q: unknown target %q (kvasir applies adapters to %s)", name, proj, strings.Join(ggufNames[:], ", "))
}
