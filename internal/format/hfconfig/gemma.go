package hfconfig

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// GemmaConfig holds the config.json keys of Gemma 2 and Gemma 3 that the Llama family has
// no counterpart for.
type GemmaConfig struct {
	// HiddenActivation is the MLP's gate activation: "gelu_pytorch_tanh" for every
	// released Gemma.
	HiddenActivation string
	// QueryPreAttnScalar scales the attention scores by its inverse square root.
	QueryPreAttnScalar float64
	// AttnLogitSoftcapping and FinalLogitSoftcapping cap the attention scores and the
	// logits (0 when null: Gemma 3).
	AttnLogitSoftcapping, FinalLogitSoftcapping float64
	// RopeLocalBaseFreq is Gemma 3's rotary base of the sliding-window layers (0 for
	// Gemma 2, whose layers share rope_theta).
	RopeLocalBaseFreq float64
	// LayerTypes gives each layer's attention, "sliding_attention" or "full_attention",
	// from layer_types or, in older configs, from the alternation (Gemma 2: every other
	// layer from the first) or sliding_window_pattern (Gemma 3: 6).
	LayerTypes []string
}

// Layer types of GemmaConfig.LayerTypes.
const (
	SlidingAttention = "sliding_attention"
	FullAttention    = "full_attention"
)

// gemmaJSON is the part of config.json GemmaConfig is read from.
type gemmaJSON struct {
	HiddenActivation      *string         `json:"hidden_activation"`
	QueryPreAttnScalar    *float64        `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping  json.RawMessage `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping json.RawMessage `json:"final_logit_softcapping"`
	RopeLocalBaseFreq     *float64        `json:"rope_local_base_freq"`
	SlidingWindowPattern  *int            `json:"sliding_window_pattern"`
	LayerTypes            []string        `json:"layer_types"`
}

// defaultGemma returns transformers' defaults for arch with the given layers.
func defaultGemma(arch string, layers int) GemmaConfig {
	g := GemmaConfig{HiddenActivation: "gelu_pytorch_tanh", QueryPreAttnScalar: 256}
	pattern := 2
	if arch == Gemma2 {
		g.AttnLogitSoftcapping, g.FinalLogitSoftcapping = 50, 30
	} else {
		g.RopeLocalBaseFreq, pattern = 10000, 6
	}
	g.LayerTypes = PatternLayers(layers, pattern)
	return g
}

// PatternLayers returns the layer types of layers layers where every pattern-th layer
// attends fully and the others through the sliding window.
func PatternLayers(layers, pattern int) []string {
	out := make([]string, layers)
	for l := range out {
		out[l] = SlidingAttention
		if (l+1)%pattern == 0 {
			out[l] = FullAttention
		}
	}
	return out
}

// parseGemma fills c.Gemma from j, transformers' defaults standing in for absent keys.
func (c *Config) parseGemma(j *gemmaJSON) error {
	g := defaultGemma(c.Architecture, c.NumHiddenLayers)
	if j.HiddenActivation != nil {
		g.HiddenActivation = *j.HiddenActivation
	}
	if j.QueryPreAttnScalar != nil {
		g.QueryPreAttnScalar = *j.QueryPreAttnScalar
	}
	var err error
	if g.AttnLogitSoftcapping, err = nullableFloat("attn_logit_softcapping", j.AttnLogitSoftcapping, g.AttnLogitSoftcapping); err != nil {
		return err
	}
	if g.FinalLogitSoftcapping, err = nullableFloat("final_logit_softcapping", j.FinalLogitSoftcapping, g.FinalLogitSoftcapping); err != nil {
		return err
	}
	if j.RopeLocalBaseFreq != nil && c.Architecture == Gemma3 {
		g.RopeLocalBaseFreq = *j.RopeLocalBaseFreq
	}
	switch {
	case j.LayerTypes != nil:
		g.LayerTypes = j.LayerTypes
	case j.SlidingWindowPattern != nil && *j.SlidingWindowPattern > 0:
		g.LayerTypes = PatternLayers(c.NumHiddenLayers, *j.SlidingWindowPattern)
	}
	if len(g.LayerTypes) != c.NumHiddenLayers {
		return fmt.Errorf("layer_types has %d entries for %d layers", len(g.LayerTypes), c.NumHiddenLayers)
	}
	for l, t := range g.LayerTypes {
		if t != SlidingAttention && t != FullAttention {
			return fmt.Errorf("layer_types[%d] is %q (want %s or %s)", l, t, SlidingAttention, FullAttention)
		}
	}
	switch {
	case !(g.QueryPreAttnScalar > 0):
		return fmt.Errorf("query_pre_attn_scalar %v must be positive", g.QueryPreAttnScalar)
	case g.AttnLogitSoftcapping < 0 || g.FinalLogitSoftcapping < 0:
		return fmt.Errorf("soft-capping values %v and %v must not be negative", g.AttnLogitSoftcapping, g.FinalLogitSoftcapping)
	case g.RopeLocalBaseFreq < 0:
		return fmt.Errorf("rope_local_base_freq %v is negative", g.RopeLocalBaseFreq)
	}
	c.Gemma = g
	return nil
}

// nullableFloat reads a number that may be absent (def) or null (0).
func nullableFloat(key string, raw json.RawMessage, def float64) (float64, error) {
	if len(raw) == 0 {
		return def, nil
	}
	var v *float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}

// marshalGemma adds Gemma's keys to the config.json map m.
func (c *Config) marshalGemma(m map[string]any) {
	g := c.Gemma
	m["hidden_activation"] = g.HiddenActivation
	m["hidden_act"] = g.HiddenActivation
	m["query_pre_attn_scalar"] = g.QueryPreAttnScalar
	m["attention_bias"] = false
	m["sliding_window"] = c.SlidingWindow
	m["layer_types"] = g.LayerTypes
	capOrNull := func(v float64) any {
		if v > 0 {
			return pyFloat(v)
		}
		return nil
	}
	m["attn_logit_softcapping"] = capOrNull(g.AttnLogitSoftcapping)
	m["final_logit_softcapping"] = capOrNull(g.FinalLogitSoftcapping)
	if c.Architecture == Gemma3 {
		m["rope_local_base_freq"] = g.RopeLocalBaseFreq
		// Older transformers read the alternation from here rather than layer_types.
		for n := 1; n <= len(g.LayerTypes); n++ {
			if samePattern(g.LayerTypes, PatternLayers(len(g.LayerTypes), n)) {
				m["sliding_window_pattern"] = n
				break
			}
		}
	}
}

func samePattern(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// pyFloat marshals as Python's json writes a float, with a decimal point even when whole
// (30.0, not 30): transformers' strict config classes refuse an integer where they declare
// a float (Gemma 2's final_logit_softcapping).
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(float64(f), 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEIN") {
		s += ".0"
	}
	return []byte(s), nil
}
