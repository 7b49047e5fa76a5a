package hfconfig

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// GenerationConfig is generation_config.json: the model's default generation settings.
// Pointer fields are nil when the file does not set them.
type GenerationConfig struct {
	BOSTokenID        TokenIDs `json:"bos_token_id,omitempty"`
	EOSTokenIDs       TokenIDs `json:"eos_token_id,omitempty"`
	PadTokenID        TokenIDs `json:"pad_token_id,omitempty"`
	DoSample          *bool    `json:"do_sample,omitempty"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	MaxLength         *int     `json:"max_length,omitempty"`
	MaxNewTokens      *int     `json:"max_new_tokens,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
}

// ReadGenerationConfig reads and parses the generation_config.json at path.
func ReadGenerationConfig(path string) (*GenerationConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hfconfig: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("hfconfig %s: %w", path, err)
	}
	return g, nil
}

// ParseGenerationConfig parses generation_config.json and checks its values' ranges.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	var g GenerationConfig
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("generation_config.json: %w", err)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("generation_config.json: %w", err)
	}
	return &g, nil
}

// Validate checks that the settings are in range.
func (g *GenerationConfig) Validate() error {
	bad := func(p *float64) bool { return p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0)) }
	switch {
	case bad(g.Temperature) || g.Temperature != nil && *g.Temperature < 0:
		return fmt.Errorf("temperature %v must be a non-negative number", *g.Temperature)
	case bad(g.TopP) || g.TopP != nil && (*g.TopP < 0 || *g.TopP > 1):
		return fmt.Errorf("top_p %v is outside [0, 1]", *g.TopP)
	case bad(g.MinP) || g.MinP != nil && (*g.MinP < 0 || *g.MinP > 1):
		return fmt.Errorf("min_p %v is outside [0, 1]", *g.MinP)
	case g.TopK != nil && *g.TopK < 0:
		return fmt.Errorf("top_k %d is negative", *g.TopK)
	case g.MaxLength != nil && *g.MaxLength < 0:
		return fmt.Errorf("max_length %d is negative", *g.MaxLength)
	case g.MaxNewTokens != nil && *g.MaxNewTokens < 0:
		return fmt.Errorf("max_new_tokens %d is negative", *g.MaxNewTokens)
	case bad(g.RepetitionPenalty) || g.RepetitionPenalty != nil && *g.RepetitionPenalty <= 0:
		return fmt.Errorf("repetition_penalty %v must be positive", *g.RepetitionPenalty)
	}
	return nil
}

// Marshal returns generation_config.json text.
func (g *GenerationConfig) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("hfconfig: generation config: %w", err)
	}
	return append(data, '\n'), nil
}
