package hfconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseGraniteConfig reads Granite 3.0 2B's config.json: its four multipliers, which
// survive Marshal; a multiplier that is not positive is refused by name.
func TestParseGraniteConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "granite.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	want := GraniteConfig{EmbeddingMultiplier: 12, ResidualMultiplier: 0.22, AttentionMultiplier: 0.015625, LogitsScaling: 8}
	if c.Architecture != Granite || c.Granite != want || !c.TieWordEmbeddings || c.NumKeyValueHeads != 8 {
		t.Errorf("parsed %+v", c)
	}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := ParseConfig(out); err != nil || c2.Granite != want {
		t.Errorf("round trip: %+v, %v", c2, err)
	}
	bad := strings.Replace(string(data), `"residual_multiplier": 0.22`, `"residual_multiplier": 0`, 1)
	if _, err := ParseConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "residual_multiplier") {
		t.Errorf("residual_multiplier 0: %v", err)
	}
}
