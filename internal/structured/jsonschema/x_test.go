package jsonschema

import (
	"os"
	"testing"
)

func TestX(t *testing.T) {
	data, _ := os.ReadFile(os.Getenv("F"))
	g, err := ToGBNF(data, Options{})
	os.WriteFile("/tmp/g.gbnf", []byte(g), 0o644)
	t.Log(err)
}
