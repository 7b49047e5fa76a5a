package hfconfig

import (
	"encoding/json"
	"fmt"
)

// The rotary scaling types this package accepts.
const (
	RopeLinear  = "linear"
	RopeDynamic = "dynamic"
	RopeLlama3  = "llama3"
	RopeYarn    = "yarn"
)

// RopeScaling is the rope_scaling object of a config.json.
type RopeScaling struct {
	// Type is "linear", "dynamic", "llama3" or "yarn" (read from "rope_type" or the older
	// "type" key).
	Type   string
	Factor float64
	// OriginalMaxPositionEmbeddings is the context length before scaling (llama3, yarn,
	// dynamic); when the file omits it, max_position_embeddings is used.
	OriginalMaxPositionEmbeddings int
	// Llama 3 parameters.
	LowFreqFactor, HighFreqFactor float64
	// YaRN parameters: BetaFast defaults to 32 and BetaSlow to 1. AttentionFactor is 0 when
	// absent (then computed from Factor, or from MScale and MScaleAllDim when given).
	BetaFast, BetaSlow   float64
	AttentionFactor      float64
	MScale, MScaleAllDim float64
	// Truncate is YaRN's "truncate" flag (nil when absent).
	Truncate *bool
}

// ropeJSON is rope_scaling as written on disk.
type ropeJSON struct {
	Type                          string   `json:"type,omitempty"`
	RopeType                      string   `json:"rope_type,omitempty"`
	Factor                        *float64 `json:"factor,omitempty"`
	OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings,omitempty"`
	LowFreqFactor                 *float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                *float64 `json:"high_freq_factor,omitempty"`
	BetaFast                      *float64 `json:"beta_fast,omitempty"`
	BetaSlow                      *float64 `json:"beta_slow,omitempty"`
	AttentionFactor               *float64 `json:"attention_factor,omitempty"`
	MScale                        *float64 `json:"mscale,omitempty"`
	MScaleAllDim                  *float64 `json:"mscale_all_dim,omitempty"`
	Truncate                      *bool    `json:"truncate,omitempty"`
	RopeTheta                     *float64 `json:"rope_theta,omitempty"` // only in rope_parameters
}

// parseRope decodes a rope_scaling (or rope_parameters) object. It returns nil for null, for
// an empty object and for the "default" type, which mean no scaling.
func parseRope(raw json.RawMessage, maxPos int) (*RopeScaling, *float64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var j ropeJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, nil, err
	}
	typ := j.RopeType
	if typ == "" {
		typ = j.Type
	}
	if j.Type != "" && j.RopeType != "" && j.Type != j.RopeType {
		return nil, nil, fmt.Errorf("type %q and rope_type %q disagree", j.Type, j.RopeType)
	}
	if typ == "" || typ == "default" {
		return nil, j.RopeTheta, nil
	}
	r := &RopeScaling{Type: typ, BetaFast: 32, BetaSlow: 1, OriginalMaxPositionEmbeddings: maxPos, Truncate: j.Truncate}
	set := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&r.Factor, j.Factor)
	set(&r.LowFreqFactor, j.LowFreqFactor)
	set(&r.HighFreqFactor, j.HighFreqFactor)
	set(&r.BetaFast, j.BetaFast)
	set(&r.BetaSlow, j.BetaSlow)
	set(&r.AttentionFactor, j.AttentionFactor)
	set(&r.MScale, j.MScale)
	set(&r.MScaleAllDim, j.MScaleAllDim)
	if j.OriginalMaxPositionEmbeddings != nil {
		r.OriginalMaxPositionEmbeddings = *j.OriginalMaxPositionEmbeddings
	}
	if err := r.validate(j); err != nil {
		return nil, nil, err
	}
	return r, j.RopeTheta, nil
}

// validate checks the parameters each type needs.
func (r *RopeScaling) validate(j ropeJSON) error {
	switch r.Type {
	case RopeLinear, RopeDynamic, RopeLlama3, RopeYarn:
	default:
		return fmt.Errorf("unsupported type %q (supported: linear, dynamic, llama3, yarn)", r.Type)
	}
	if j.Factor == nil {
		return fmt.Errorf("%s: factor missing", r.Type)
	}
	if !(r.Factor > 0) {
		return fmt.Errorf("%s: factor %v must be positive", r.Type, r.Factor)
	}
	if r.OriginalMaxPositionEmbeddings <= 0 {
		return fmt.Errorf("%s: original_max_position_embeddings %d must be positive", r.Type, r.OriginalMaxPositionEmbeddings)
	}
	switch r.Type {
	case RopeLlama3:
		if j.LowFreqFactor == nil || j.HighFreqFactor == nil || j.OriginalMaxPositionEmbeddings == nil {
			return fmt.Errorf("llama3: needs low_freq_factor, high_freq_factor and original_max_position_embeddings")
		}
		if !(r.LowFreqFactor > 0) || !(r.HighFreqFactor > r.LowFreqFactor) {
			return fmt.Errorf("llama3: need 0 < low_freq_factor (%v) < high_freq_factor (%v)", r.LowFreqFactor, r.HighFreqFactor)
		}
	case RopeYarn:
		if !(r.BetaFast > 0) || !(r.BetaSlow > 0) || r.BetaSlow > r.BetaFast {
			return fmt.Errorf("yarn: need 0 < beta_slow (%v) <= beta_fast (%v)", r.BetaSlow, r.BetaFast)
		}
		if r.AttentionFactor < 0 {
			return fmt.Errorf("yarn: attention_factor %v is negative", r.AttentionFactor)
		}
	}
	return nil
}

// toJSON returns the object transformers accepts, with both "rope_type" and "type" keys.
func (r *RopeScaling) toJSON() map[string]any {
	m := map[string]any{"rope_type": r.Type, "type": r.Type, "factor": r.Factor}
	switch r.Type {
	case RopeLlama3:
		m["low_freq_factor"] = r.LowFreqFactor
		m["high_freq_factor"] = r.HighFreqFactor
		m["original_max_position_embeddings"] = r.OriginalMaxPositionEmbeddings
	case RopeYarn:
		m["beta_fast"] = r.BetaFast
		m["beta_slow"] = r.BetaSlow
		m["original_max_position_embeddings"] = r.OriginalMaxPositionEmbeddings
		if r.AttentionFactor != 0 {
			m["attention_factor"] = r.AttentionFactor
		}
		if r.MScale != 0 {
			m["mscale"] = r.MScale
		}
		if r.MScaleAllDim != 0 {
			m["mscale_all_dim"] = r.MScaleAllDim
		}
		if r.Truncate != nil {
			m["truncate"] = *r.Truncate
		}
	case RopeDynamic:
		m["original_max_position_embeddings"] = r.OriginalMaxPositionEmbeddings
	}
	return m
}
