package testdata

import (
	"os"
	"testing"
)

func TestPathFindsReadme(t *testing.T) {
	p := Path(t, "README.md")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Path returned %s which does not exist: %v", p, err)
	}
}
