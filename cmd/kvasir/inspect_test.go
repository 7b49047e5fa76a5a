package main

import (
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// withBlockCount rewrites the GGUF at src with llama.block_count set to n.
func withBlockCount(t *testing.T, src string, n uint64) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kvs := append([]gguf.KV(nil), f.KV...)
	for i := range kvs {
		if kvs[i].Key == "llama.block_count" {
			kvs[i].Value = gguf.Uint64(n)
		}
	}
	var ts []gguf.WriterTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, gguf.WriterTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: data})
	}
	out := filepath.Join(t.TempDir(), "hostile.gguf")
	if err := gguf.WriteFile(out, kvs, ts, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInspectHostileHeader: `kvasir inspect` of a GGUF declaring a million layers prints
// what the header declares and why kvasir refuses it, within a second and 50 MB, and
// fails.
func TestInspectHostileHeader(t *testing.T) {
	p := withBlockCount(t, testdata.Path(t, "models/stories260K/stories260K.gguf"), 1_000_000)
	const reason = "llama.block_count is 1000000, but the tensors hold only 5 layers"
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	out, err := captureOutputErr(t, func() error { return runInspect([]string{p}) })
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), reason) {
		t.Errorf("error %v, want one containing %q", err, reason)
	}
	for _, want := range []string{"1000000 layers, dim 64, 8 heads", "tokenizer:      spm, 512 tokens", "refused:        gguf " + p + ": config: " + reason} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect printed\n%s\nwant a line containing %q", out, want)
		}
	}
	if elapsed > time.Second {
		t.Errorf("took %v, want under a second", elapsed)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 50<<20 {
		t.Errorf("allocated %d MB, want at most 50 MB", grew>>20)
	}

	out, err = captureOutputErr(t, func() error { return runInspect([]string{"--json", p}) })
	var in inspection
	if jerr := json.Unmarshal([]byte(out), &in); jerr != nil || err == nil {
		t.Fatalf("--json: %v, error %v", jerr, err)
	}
	if in.Config.Layers != 1_000_000 || !strings.Contains(in.Problem, reason) {
		t.Errorf("--json: %d layers, problem %q; want the declared 1000000 and the reason", in.Config.Layers, in.Problem)
	}
}
