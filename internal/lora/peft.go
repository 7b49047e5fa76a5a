package lora

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// PEFT's file names in an adapter folder.
const (
	peftConfigFile  = "adapter_config.json"
	peftWeightsFile = "adapter_model.safetensors"
)

// peftConfig is the part of PEFT's adapter_config.json that decides how the weights apply.
type peftConfig struct {
	PeftType      string          `json:"peft_type"`
	R             int             `json:"r"`
	LoraAlpha     float64         `json:"lora_alpha"`
	TargetModules json.RawMessage `json:"target_modules"`
	UseRSLoRA     bool            `json:"use_rslora"`
	UseDoRA       bool            `json:"use_dora"`
	FanInFanOut   bool            `json:"fan_in_fan_out"`
	Bias          string          `json:"bias"`
	ModulesToSave []string        `json:"modules_to_save"`
	RankPattern   map[string]any  `json:"rank_pattern"`
	AlphaPattern  map[string]any  `json:"alpha_pattern"`
	BaseModel     string          `json:"base_model_name_or_path"`
}

// parsePEFTConfig reads adapter_config.json and refuses what kvasir does not apply.
func parsePEFTConfig(data []byte) (*peftConfig, [NumTargets]bool, error) {
	var c peftConfig
	var targets [NumTargets]bool
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, targets, fmt.Errorf("%s: %w", peftConfigFile, err)
	}
	switch {
	case c.PeftType != "" && c.PeftType != "LORA":
		return nil, targets, fmt.Errorf("%s: peft_type %q: only LORA adapters are served", peftConfigFile, c.PeftType)
	case c.R <= 0:
		return nil, targets, fmt.Errorf("%s: r %d: want a positive rank", peftConfigFile, c.R)
	case c.UseDoRA:
		return nil, targets, fmt.Errorf("%s: use_dora: DoRA adapters are not supported", peftConfigFile)
	case c.FanInFanOut:
		return nil, targets, fmt.Errorf("%s: fan_in_fan_out: adapters of Conv1D layers (GPT-2) are not supported", peftConfigFile)
	case c.Bias != "" && c.Bias != "none":
		return nil, targets, fmt.Errorf("%s: bias %q: adapters that train biases are not supported", peftConfigFile, c.Bias)
	case len(c.ModulesToSave) > 0:
		return nil, targets, fmt.Errorf("%s: modules_to_save %v: adapters that replace whole modules are not supported", peftConfigFile, c.ModulesToSave)
	case len(c.RankPattern) > 0 || len(c.AlphaPattern) > 0:
		return nil, targets, fmt.Errorf("%s: rank_pattern/alpha_pattern: per-module ranks are not supported", peftConfigFile)
	case math.IsNaN(c.LoraAlpha) || math.IsInf(c.LoraAlpha, 0):
		return nil, targets, fmt.Errorf("%s: lora_alpha %v", peftConfigFile, c.LoraAlpha)
	}
	var list []string
	var one string
	switch {
	case len(c.TargetModules) == 0 || string(c.TargetModules) == "null":
		return nil, targets, fmt.Errorf("%s: no target_modules", peftConfigFile)
	case json.Unmarshal(c.TargetModules, &list) == nil:
	case json.Unmarshal(c.TargetModules, &one) == nil && one == "all-linear":
		list = peftNames[:]
	default:
		return nil, targets, fmt.Errorf("%s: target_modules %s: want a list of module names or \"all-linear\"", peftConfigFile, c.TargetModules)
	}
	for _, m := range list {
		t, ok := targetOfPEFT(m)
		if !ok {
			return nil, targets, fmt.Errorf("%s: target module %q: unknown (kvasir applies adapters to %s)", peftConfigFile, m, strings.Join(peftNames[:], ", "))
		}
		targets[t] = true
	}
	if targets == ([NumTargets]bool{}) {
		return nil, targets, fmt.Errorf("%s: target_modules is an empty list", peftConfigFile)
	}
	return &c, targets, nil
}

// peftTensor matches PEFT's tensor names: base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight,
// with an optional adapter name before .weight as older PEFT versions wrote it.
var peftTensor = regexp.MustCompile(`^(?:base_model\.model\.)?(?:model\.)?layers\.(\d+)\.(?:self_attn|mlp)\.([a-z_]+)\.lora_([AB])(?:\.[A-Za-z0-9_-]+)?\.weight$`)

// OpenPEFT reads a PEFT LoRA folder (adapter_config.json and adapter_model.safetensors) for
// a base model of config c; interleaved says the base keeps q and k rows in the
// interleaved rotary order (GGUF "llama", llama2.c), into which PEFT's Hugging Face rows
// are permuted. maxRank (0: no bound) limits the rank.
func OpenPEFT(dir string, c format.Config, maxRank int) (*Adapter, error) {
	a, err := openPEFT(dir, c, maxRank)
	if err != nil {
		return nil, fmt.Errorf("lora %s: %w", dir, err)
	}
	return a, nil
}

func openPEFT(dir string, c format.Config, maxRank int) (*Adapter, error) {
	data, err := os.ReadFile(filepath.Join(dir, peftConfigFile))
	if err != nil {
		return nil, err
	}
	pc, targets, err := parsePEFTConfig(data)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, peftWeightsFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := &Adapter{Path: dir, Alpha: pc.LoraAlpha, Layers: make([][NumTargets]*Pair, c.Layers)}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		m := peftTensor.FindStringSubmatch(ti.Name)
		if m == nil {
			return nil, fmt.Errorf("tensor %q: not a LoRA weight of a Llama block's projection", ti.Name)
		}
		l, err := strconv.Atoi(m[1])
		if err != nil || l >= c.Layers {
			return nil, fmt.Errorf("tensor %q: layer %s outside the base's %d", ti.Name, m[1], c.Layers)
		}
		t, ok := targetOfPEFT(m[2])
		if !ok || !targets[t] {
			return nil, fmt.Errorf("tensor %q: module %q is not among the config's target_modules", ti.Name, m[2])
		}
		qt, ok := map[safetensors.DType]quant.Type{safetensors.F32: quant.F32, safetensors.F16: quant.F16, safetensors.BF16: quant.BF16}[ti.DType]
		if !ok || len(ti.Shape) != 2 {
			return nil, fmt.Errorf("tensor %q: %s %v: want a 2-D F32, F16 or BF16 matrix", ti.Name, ti.DType, ti.Shape)
		}
		vals := make([]float32, ti.Elements())
		if err := quant.Dequantize(qt, ti.Data, vals); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
		if err := a.place(l, t, m[3] == "A", ti.Shape, vals); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
	}
	if err := a.finish(c, func(r int) float32 {
		if pc.UseRSLoRA {
			return float32(pc.LoraAlpha / math.Sqrt(float64(r)))
		}
		return float32(pc.LoraAlpha / float64(r))
	}, maxRank); err != nil {
		return nil, err
	}
	if c.RopeStyle == format.RopeInterleaved {
		a.permuteQK(c, true)
	}
	return a, nil
}

// place sets layer l's target t A (isA) or B from a tensor of the given shape.
func (a *Adapter) place(l int, t Target, isA bool, shape []int, vals []float32) error {
	p := a.Layers[l][t]
	if p == nil {
		p = &Pair{}
		a.Layers[l][t] = p
	}
	rows, cols := shape[0], shape[1]
	if isA {
		if p.A != nil {
			return fmt.Errorf("a second lora_A")
		}
		if p.B != nil && rows != p.Rank {
			return fmt.Errorf("lora_A of rank %d, lora_B of rank %d", rows, p.Rank)
		}
		p.A, p.Rank, p.In = vals, rows, cols
		return nil
	}
	if p.B != nil {
		return fmt.Errorf("a second lora_B")
	}
	if p.A != nil && cols != p.Rank {
		return fmt.Errorf("lora_B of rank %d, lora_A of rank %d", cols, p.Rank)
	}
	p.B, p.Rank, p.Out = vals, cols, rows
	return nil
}

// finish checks that every pair is whole, gives each its scale (of its rank) and checks
// the adapter against the base.
func (a *Adapter) finish(c format.Config, scale func(rank int) float32, maxRank int) error {
	for l := range a.Layers {
		for t, p := range a.Layers[l] {
			if p == nil {
				continue
			}
			if p.A == nil || p.B == nil {
				return fmt.Errorf("layer %d: %s: lora_A without lora_B or the reverse", l, Target(t))
			}
			p.Scale = scale(p.Rank)
		}
	}
	return a.check(c, maxRank)
}

// permuteQK reorders the output rows of the q and k pairs' B between the Hugging Face
// (NeoX) rotary order and the interleaved one (toInterleaved picks the direction), as the
// converters permute a base model's q and k rows.
func (a *Adapter) permuteQK(c format.Config, toInterleaved bool) {
	for l := range a.Layers {
		for t, heads := range map[Target]int{Q: c.Heads, K: c.KVHeads} {
			p := a.Layers[l][t]
			if p == nil {
				continue
			}
			hd := p.Out / heads
			b := make([]float32, len(p.B))
			for h := range heads {
				for r := range hd {
					src := h*hd + format.InterleavedToNeox(r, hd)
					if !toInterleaved {
						src = h*hd + format.NeoxToInterleaved(r, hd)
					}
					copy(b[(h*hd+r)*p.Rank:(h*hd+r+1)*p.Rank], p.B[src*p.Rank:(src+1)*p.Rank])
				}
			}
			p.B = b
		}
	}
}
