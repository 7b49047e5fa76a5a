package hfconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestJSONFloat: floats that transformers' strict configs type as float are written with a
// fraction or an exponent, and read back as the same value.
func TestJSONFloat(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "0.0"}, {1, "1.0"}, {1.5, "1.5"}, {-2, "-2.0"}, {1e-6, "1e-06"}, {1e21, "1e+21"}} {
		b, err := json.Marshal(jsonFloat(c.v))
		if err != nil || string(b) != c.want {
			t.Errorf("jsonFloat(%g) = %s, %v; want %s", c.v, b, err, c.want)
		}
		var back float64
		if err := json.Unmarshal(b, &back); err != nil || back != c.v {
			t.Errorf("%s reads back as %g, %v", b, back, err)
		}
	}
	h, err := NewConfig(Llama, 256, 64, 128, 2, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	text, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), `"attention_dropout": 0.0`) {
		t.Errorf("config.json without a float attention_dropout:\n%s", text)
	}
}
