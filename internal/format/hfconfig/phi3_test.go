package hfconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParsePhi3Config reads Phi-3-mini-4k's config.json, and refuses LongRoPE (the 128k
// models) and partial rotary embedding with the key named.
func TestParsePhi3Config(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "phi3.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != Phi3 || c.NumKeyValueHeads != 32 || c.HeadDim != 96 || c.SlidingWindow != 2047 ||
		c.TieWordEmbeddings || c.RMSNormEps != 1e-5 || c.EOSTokenIDs[0] != 32000 || c.RopeScaling != nil {
		t.Errorf("parsed %+v", c)
	}
	s := string(data)
	for _, tc := range []struct{ old, new, want string }{
		{`"rope_scaling": null`, `"rope_scaling": {"type": "longrope", "long_factor": [1], "short_factor": [1]}`, "longrope"},
		{`"rope_theta": 10000.0,`, `"rope_theta": 10000.0, "partial_rotary_factor": 0.75,`, "partial_rotary_factor"},
	} {
		_, err := ParseConfig([]byte(strings.Replace(s, tc.old, tc.new, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.new, err, tc.want)
		}
	}
}
