// Package lora holds low-rank adapters (LoRA, Hu et al. 2021) for serving many fine-tunes
// of one base model at once: the adapter's weights as read from disk (a PEFT folder or a
// llama.cpp GGUF LoRA file), checked against the base model's shapes, and a registry of the
// adapters a server has loaded by name.
//
// An adapter changes a projection y = W·x of the base into y = W·x + s·B·(A·x), with A of
// r x in and B of out x r for a small rank r, and s = alpha/r (alpha/sqrt(r) for rsLoRA).
// The base weights are never touched: the model adds the low-rank term per token, so
// requests of different adapters (and of none) share one batch (S-LoRA, Punica). Merging
// W' = W + s·B·A gives the same model, which is what tests check against.
package lora

import (
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// Target names one of a Llama block's projections an adapter may change.
type Target int

// The projections of a block, in the order the model runs them.
const (
	Q Target = iota
	K
	V
	O
	Gate
	Up
	Down
	NumTargets
)

// peftNames are the module names PEFT (and Hugging Face) give the targets.
var peftNames = [NumTargets]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// ggufNames are the tensor names llama.cpp gives the targets' base weights.
var ggufNames = [NumTargets]string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}

func (t Target) String() string {
	if t < 0 || t >= NumTargets {
		return fmt.Sprintf("target(%d)", int(t))
	}
	return peftNames[t]
}

// targetOfPEFT returns the target of a PEFT module name ("q_proj").
func targetOfPEFT(name string) (Target, bool) {
	for t, n := range peftNames {
		if n == name {
			return Target(t), true
		}
	}
	return 0, false
}

// Dims returns the input and output widths of target t's projection in a model of config c.
func Dims(c format.Config, t Target) (in, out int) {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	switch t {
	case Q:
		return c.Dim, q
	case K, V:
		return c.Dim, kv
	case O:
		return q, c.Dim
	case Gate, Up:
		return c.Dim, c.FFNDim
	default:
		return c.FFNDim, c.Dim
	}
}

// Pair is one projection's low-rank update: A is Rank x In and B is Out x Rank, row-major
// F32, and the update of an input x is Scale · B·(A·x).
type Pair struct {
	Rank, In, Out int
	A, B          []float32
	Scale         float32
}

// Adapter is a LoRA adapter read from disk and checked against a base model: per layer,
// the pairs of the projections it targets (nil for the others).
type Adapter struct {
	// Name is what requests call it by (their "model" field); Path where it was read.
	Name, Path string
	// ID is unique among the adapters a process loaded: two loads of one file under one
	// name get different IDs, so the prefix cache never mixes their keys and values.
	ID uint64
	// Rank is the largest rank of its pairs; Alpha the lora_alpha it was trained with.
	Rank  int
	Alpha float64
	// Targets lists the projections it changes, in Target order.
	Targets []Target
	// Layers holds, for layer l and target t, Layers[l][t] (nil when not targeted).
	Layers [][NumTargets]*Pair
}

// CacheSalt returns the prefix-cache salt of the adapter's requests: blocks computed with
// one adapter are never reused by another or by the base.
func (a *Adapter) CacheSalt() string { return fmt.Sprintf("\x00lora:%d", a.ID) }

// Bytes returns the bytes of the adapter's weights as F32.
func (a *Adapter) Bytes() int64 {
	var n int64
	for _, l := range a.Layers {
		for _, p := range l {
			if p != nil {
				n += 4 * int64(len(p.A)+len(p.B))
			}
		}
	}
	return n
}

// Merged returns W + Scale·B·A for a row-major Out x In base matrix w of target t in
// layer l (w itself when the adapter leaves that projection alone): the merged-weights
// model the adapter is equivalent to.
func (a *Adapter) Merged(l int, t Target, w []float32) []float32 {
	p := a.Layers[l][t]
	if p == nil {
		return w
	}
	out := make([]float32, len(w))
	for o := range p.Out {
		for i := range p.In {
			var s float32
			for r := range p.Rank {
				s += p.B[o*p.Rank+r] * p.A[r*p.In+i]
			}
			out[o*p.In+i] = w[o*p.In+i] + p.Scale*s
		}
	}
	return out
}

// check verifies the adapter against the base config: every pair's shape, the rank bound,
// and that it changes something.
func (a *Adapter) check(c format.Config, maxRank int) error {
	if len(a.Layers) != c.Layers {
		return fmt.Errorf("%d layers for a base of %d", len(a.Layers), c.Layers)
	}
	seen := [NumTargets]bool{}
	for l, pairs := range a.Layers {
		for t, p := range pairs {
			if p == nil {
				continue
			}
			if c.Experts > 0 && Target(t) >= Gate {
				return fmt.Errorf("layer %d: %s: the base is a mixture of experts, whose MLPs adapters cannot target", l, Target(t))
			}
			in, out := Dims(c, Target(t))
			if p.In != in || p.Out != out {
				return fmt.Errorf("layer %d: %s: adapter maps %d to %d features, the base model's projection %d to %d (an adapter of another base?)", l, Target(t), p.In, p.Out, in, out)
			}
			if p.Rank <= 0 || len(p.A) != p.Rank*p.In || len(p.B) != p.Out*p.Rank {
				return fmt.Errorf("layer %d: %s: rank %d with %d A and %d B values", l, Target(t), p.Rank, len(p.A), len(p.B))
			}
			if maxRank > 0 && p.Rank > maxRank {
				return fmt.Errorf("rank %d exceeds --max-lora-rank %d", p.Rank, maxRank)
			}
			a.Rank = max(a.Rank, p.Rank)
			seen[t] = true
		}
	}
	a.Targets = a.Targets[:0]
	for t, ok := range seen {
		if ok {
			a.Targets = append(a.Targets, Target(t))
		}
	}
	if len(a.Targets) == 0 {
		return fmt.Errorf("no LoRA weights for any layer")
	}
	return nil
}

// Fits reports, without changing the adapter, whether it applies to a base of config c
// under the rank bound maxRank (0: none): its layer count, every pair's shape and rank.
func (a *Adapter) Fits(c format.Config, maxRank int) error {
	if len(a.Layers) != c.Layers {
		return fmt.Errorf("lora %q: %d layers for a base of %d", a.Name, len(a.Layers), c.Layers)
	}
	for l, pairs := range a.Layers {
		for t, p := range pairs {
			if p == nil {
				continue
			}
			if in, out := Dims(c, Target(t)); p.In != in || p.Out != out {
				return fmt.Errorf("lora %q: layer %d %s maps %d to %d features, the base %d to %d", a.Name, l, Target(t), p.In, p.Out, in, out)
			}
			if maxRank > 0 && p.Rank > maxRank {
				return fmt.Errorf("lora %q: rank %d exceeds --max-lora-rank %d", a.Name, p.Rank, maxRank)
			}
		}
	}
	return nil
}

// TargetNames returns the PEFT names of the adapter's targets.
func (a *Adapter) TargetNames() string {
	names := make([]string, len(a.Targets))
	for i, t := range a.Targets {
		names[i] = t.String()
	}
	return strings.Join(names, ",")
}
