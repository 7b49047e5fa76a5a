package mmap

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := []byte("mapped bytes")
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, unmap, err := File(f, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(want) {
		t.Errorf("mapped %q, want %q", data, want)
	}
	if err := unmap(); err != nil {
		t.Error(err)
	}
	empty, unmap, err := File(f, 0)
	if err != nil || len(empty) != 0 {
		t.Errorf("empty mapping: %v, %d bytes", err, len(empty))
	}
	unmap()
	if _, _, err := File(f, -1); err == nil {
		t.Error("a negative size should be refused")
	}
}
