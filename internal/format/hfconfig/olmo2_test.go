package hfconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// TestParseOlmo2Config reads OLMo 2 1B's config.json (a null bos_token_id: none).
func TestParseOlmo2Config(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "olmo2.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != Olmo2 || !c.QKNorm() || c.RopeTheta != 500000 || c.TieWordEmbeddings || len(c.BOSTokenID) != 0 ||
		len(c.EOSTokenIDs) != 1 || c.EOSTokenIDs[0] != 100257 || c.HeadDim != 128 {
		t.Errorf("parsed %+v", c)
	}
}
