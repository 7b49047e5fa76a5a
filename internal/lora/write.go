package lora

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Random makes an adapter of rank r and the given alpha for a base of config c, changing
// targets in every layer, with A and B drawn uniformly from [-amp, amp) by a generator
// seeded with seed: the synthetic adapters of tests and benchmarks. (A trained adapter's B
// starts at zero; a random one changes the model visibly.)
func Random(c format.Config, r int, alpha float64, targets []Target, amp float32, seed uint64) *Adapter {
	rng := rand.New(rand.NewPCG(seed, 0x10a))
	draw := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (rng.Float32()*2 - 1) * amp
		}
		return v
	}
	a := &Adapter{Rank: r, Alpha: alpha, Targets: targets, Layers: make([][NumTargets]*Pair, c.Layers)}
	for l := range a.Layers {
		for _, t := range targets {
			in, out := Dims(c, t)
			a.Layers[l][t] = &Pair{Rank: r, In: in, Out: out, A: draw(r * in), B: draw(out * r), Scale: float32(alpha / float64(r))}
		}
	}
	return a
}

// f32Bytes encodes values as little-endian F32.
func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// WritePEFT writes the adapter as a PEFT folder (adapter_config.json and
// adapter_model.safetensors, F32) at dir, its q and k rows in the Hugging Face order:
// interleaved says the adapter holds them in the interleaved order of its base (as one
// read for such a base does), which is undone. Every pair must have the adapter's rank.
func WritePEFT(dir string, a *Adapter, c format.Config, interleaved bool) error {
	if interleaved {
		cp := a.clone()
		cp.permuteQK(c, false)
		a = cp
	}
	var tensors []safetensors.WriteTensor
	for l, pairs := range a.Layers {
		for t, p := range pairs {
			if p == nil {
				continue
			}
			if p.Rank != a.Rank {
				return fmt.Errorf("lora: write %s: layer %d %s of rank %d in an adapter of rank %d", dir, l, Target(t), p.Rank, a.Rank)
			}
			block := "self_attn"
			if Target(t) >= Gate {
				block = "mlp"
			}
			prefix := fmt.Sprintf("base_model.model.model.layers.%d.%s.%s.", l, block, Target(t))
			tensors = append(tensors,
				safetensors.WriteTensor{Name: prefix + "lora_A.weight", DType: safetensors.F32, Shape: []int{p.Rank, p.In}, Data: f32Bytes(p.A)},
				safetensors.WriteTensor{Name: prefix + "lora_B.weight", DType: safetensors.F32, Shape: []int{p.Out, p.Rank}, Data: f32Bytes(p.B)})
		}
	}
	targets := make([]string, len(a.Targets))
	for i, t := range a.Targets {
		targets[i] = t.String()
	}
	cfg, err := json.MarshalIndent(map[string]any{
		"peft_type": "LORA", "r": a.Rank, "lora_alpha": a.Alpha, "target_modules": targets,
		"lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": false, "use_rslora": false,
		"task_type": "CAUSAL_LM", "base_model_name_or_path": "",
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lora: write %s: %w", dir, err)
	}
	if err := safetensors.Write(filepath.Join(dir, peftWeightsFile), tensors, nil, nil); err != nil {
		return fmt.Errorf("lora: write %s: %w", dir, err)
	}
	tmp := filepath.Join(dir, "."+peftConfigFile+".tmp")
	if err := os.WriteFile(tmp, cfg, 0o644); err != nil {
		return fmt.Errorf("lora: write %s: %w", dir, err)
	}
	return os.Rename(tmp, filepath.Join(dir, peftConfigFile))
}

// WriteGGUF writes the adapter, as held for a base of config c, as a llama.cpp LoRA file
// (F32 tensors) of c's architecture: a Llama's q and k rows in the interleaved order
// llama.cpp keeps them in.
func WriteGGUF(path string, a *Adapter, c format.Config) error {
	if c.Arch == "llama" && c.RopeStyle == format.RopeNeox {
		cp := a.clone()
		cp.permuteQK(c, true)
		a = cp
	}
	kvs := []gguf.KV{
		{Key: gguf.KeyArchitecture, Value: gguf.String(c.Arch)},
		{Key: keyType, Value: gguf.String("adapter")},
		{Key: keyAdapter, Value: gguf.String("lora")},
		{Key: keyLoRAAlpha, Value: gguf.Float32(float32(a.Alpha))},
	}
	var tensors []gguf.WriterTensor
	for l, pairs := range a.Layers {
		for t, p := range pairs {
			if p == nil {
				continue
			}
			name := fmt.Sprintf("blk.%d.%s.weight.lora_", l, ggufNames[t])
			tensors = append(tensors,
				gguf.WriterTensor{Name: name + "a", Type: quant.F32, Dims: []uint64{uint64(p.In), uint64(p.Rank)}, Data: f32Bytes(p.A)},
				gguf.WriterTensor{Name: name + "b", Type: quant.F32, Dims: []uint64{uint64(p.Rank), uint64(p.Out)}, Data: f32Bytes(p.B)})
		}
	}
	return gguf.WriteFile(path, kvs, tensors, nil)
}

// clone copies the adapter's pairs (not its weights' backing arrays, which are replaced).
func (a *Adapter) clone() *Adapter {
	cp := *a
	cp.Layers = make([][NumTargets]*Pair, len(a.Layers))
	for l, pairs := range a.Layers {
		for t, p := range pairs {
			if p != nil {
				q := *p
				cp.Layers[l][t] = &q
			}
		}
	}
	return &cp
}
