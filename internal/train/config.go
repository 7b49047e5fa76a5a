package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Config is the architecture of a student: a Llama with RMSNorm, rotary attention
// (grouped-query when KVHeads < Heads) and a SwiGLU MLP. Its JSON form is what
// `kvasir distill --student CONFIG` reads; the vocabulary always comes from the teacher.
type Config struct {
	Dim     int `json:"dim"`
	Layers  int `json:"layers"`
	Heads   int `json:"heads"`
	KVHeads int `json:"kv_heads"`
	Hidden  int `json:"hidden"` // the MLP's intermediate size
	Ctx     int `json:"ctx"`    // training window and the written model's context length
	// Optional, with defaults:
	NormEps   float64 `json:"norm_eps,omitempty"`   // 1e-5
	RopeTheta float64 `json:"rope_theta,omitempty"` // 10000
	Tied      *bool   `json:"tied,omitempty"`       // LM head shares the embedding table (true)
	Vocab     int     `json:"-"`                    // set from the teacher
}

// ParseConfig reads a JSON student config. Unknown keys are an error (a misspelled
// "kv_head" must not silently train a different model).
func ParseConfig(r io.Reader) (Config, error) {
	var c Config
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("student config: %w", err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("student config: more than one JSON value")
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.Tied == nil {
		t := true
		c.Tied = &t
	}
	return c, nil
}

// ParseConfigBytes is ParseConfig of a byte slice.
func ParseConfigBytes(b []byte) (Config, error) { return ParseConfig(bytes.NewReader(b)) }

// TiedHead reports whether the LM head reuses the embedding table.
func (c Config) TiedHead() bool { return c.Tied == nil || *c.Tied }

// HeadDim is the size of one attention head.
func (c Config) HeadDim() int { return c.Dim / max(c.Heads, 1) }

// Validate checks that the config describes a model this package can train.
func (c Config) Validate() error {
	const most = 1 << 16
	for _, f := range []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads}, {"kv_heads", c.KVHeads}, {"hidden", c.Hidden}, {"ctx", c.Ctx}} {
		if f.v <= 0 || f.v > most {
			return fmt.Errorf("student config: %s = %d: want 1..%d", f.name, f.v, most)
		}
	}
	switch {
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("student config: dim %d is not a multiple of heads %d", c.Dim, c.Heads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("student config: head size %d (dim/heads) must be even for rotary embedding", c.HeadDim())
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("student config: heads %d is not a multiple of kv_heads %d", c.Heads, c.KVHeads)
	case c.Ctx < 2:
		return fmt.Errorf("student config: ctx %d: want at least 2", c.Ctx)
	case c.Vocab <= 0:
		return fmt.Errorf("student config: no vocabulary size (it comes from the teacher)")
	case c.NormEps <= 0 || c.RopeTheta <= 0:
		return fmt.Errorf("student config: norm_eps and rope_theta must be positive")
	}
	return nil
}
