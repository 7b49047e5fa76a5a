package quantize

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Plan says which type each tensor of a model is encoded in: one type for every weight
// matrix, or a mixed preset in the manner of llama.cpp's Q4_K_M.
type Plan struct {
	Name string
	// Base is the type of most weight matrices.
	Base quant.Type
	// More is the type of the attention value and feed-forward down projections of the
	// layers use_more_bits picks (mixed presets only; F32 otherwise).
	More quant.Type
}

// weightTypes are the types a weight matrix may be encoded in.
var weightTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0,
	quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// presets are the mixed presets, named as llama.cpp names them.
var presets = map[string]Plan{
	"q4_k_m": {Name: "q4_k_m", Base: quant.Q4_K, More: quant.Q6_K},
	"q5_k_m": {Name: "q5_k_m", Base: quant.Q5_K, More: quant.Q6_K},
}

// ParsePlan reads a --dtype value: a weight type (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k,
// q4_k, q5_k, q6_k, f16, bf16, f32) or a mixed preset (q4_k_m, q5_k_m).
func ParsePlan(name string) (Plan, error) {
	n := strings.ToLower(name)
	if p, ok := presets[n]; ok {
		return p, nil
	}
	t, err := quant.ParseType(n)
	if err == nil {
		for _, w := range weightTypes {
			if w == t {
				return Plan{Name: n, Base: t}, nil
			}
		}
	}
	var names []string
	for _, w := range weightTypes {
		names = append(names, strings.ToLower(w.String()))
	}
	return Plan{}, fmt.Errorf("unknown type %q: want one of %s, or a mixed preset (q4_k_m, q5_k_m)", name, strings.Join(names, ", "))
}

// FileType is the type general.file_type reports.
func (p Plan) FileType() quant.Type { return p.Base }

var layerRE = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)

// TypeFor returns the type tensor name of shape (outermost first) is written in, in a
// model of layers blocks; tied says the token embedding doubles as the output projection.
// Vectors (norms, biases) stay F32. As llama.cpp does, the output projection gets Q6_K
// (unless the plan is Q8_0 or wider), and a matrix whose rows are not whole blocks of its
// type falls back to a type whose blocks fit, else F16.
func (p Plan) TypeFor(name string, shape []int, layers int, tied bool) quant.Type {
	if len(shape) < 2 {
		return quant.F32
	}
	cols := shape[len(shape)-1]
	t := p.Base
	output := name == "output.weight" || (tied && name == "token_embd.weight")
	switch {
	case output:
		if isBlockType(t) && t != quant.Q8_0 {
			t = quant.Q6_K
		}
	case p.More != quant.F32:
		if m := layerRE.FindStringSubmatch(name); m != nil {
			l, _ := strconv.Atoi(m[1])
			if (m[2] == "attn_v.weight" || m[2] == "ffn_down.weight") && useMoreBits(l, layers) {
				t = p.More
			}
		}
	}
	return fitType(t, cols)
}

// useMoreBits is llama.cpp's choice of the layers that get more bits in its mixed presets:
// the first and last eighth of the layers and every third one between.
func useMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

func isBlockType(t quant.Type) bool { return t.BlockSize() > 1 }

// fitType returns t, or the type llama.cpp falls back to when a row of cols values is not
// a whole number of t's blocks: the k-quants a legacy type of about as many bits, then F16.
func fitType(t quant.Type, cols int) quant.Type {
	if cols%t.BlockSize() == 0 {
		return t
	}
	switch t {
	case quant.Q2_K, quant.Q3_K:
		t = quant.Q4_0
	case quant.Q4_K:
		t = quant.Q5_0
	case quant.Q5_K:
		t = quant.Q5_1
	case quant.Q6_K:
		t = quant.Q8_0
	}
	if cols%t.BlockSize() == 0 {
		return t
	}
	return quant.F16
}
