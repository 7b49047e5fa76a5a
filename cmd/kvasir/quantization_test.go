package main

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestQuantizationFlag: --quantization is parsed with the engine flags of every scope (none
// by default, fp8), and an unknown value is an error naming the flag.
func TestQuantizationFlag(t *testing.T) {
	for _, scope := range []flagScope{loadFlags, allEngineFlags} {
		options := func(args ...string) (kvasir.Options, error) {
			fs := newFlags("test", "")
			ef := addEngineFlags(fs, scope)
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			return ef.options()
		}
		if opt, err := options(); err != nil || opt.Quantization != kvasir.QuantizationNone {
			t.Errorf("scope %d: default %v, %v", scope, opt.Quantization, err)
		}
		if opt, err := options("--quantization", "fp8"); err != nil || opt.Quantization != kvasir.QuantizationFP8 {
			t.Errorf("scope %d: fp8: %v, %v", scope, opt.Quantization, err)
		}
		if _, err := options("--quantization", "int4"); err == nil || !strings.HasPrefix(err.Error(), `--quantization: quantization "int4"`) {
			t.Errorf("scope %d: int4: %v", scope, err)
		}
	}
}

// TestRunFP8: `kvasir run --quantization fp8` runs stories260K from its F32 GGUF, and
// refuses the Q8_0 one with an error saying it is already quantized.
func TestRunFP8(t *testing.T) {
	args := []string{"-p", "Once upon a time", "--temperature", "0", "-n", "40", "--threads", "1", "--quantization", "fp8"}
	out := captureStdout(t, func() error {
		return runRun(append([]string{"-m", testdata.Path(t, "models/stories260K/stories260K.gguf")}, args...))
	})
	if !strings.HasPrefix(out, "Once upon a time") || len(out) < 60 {
		t.Errorf("fp8 run printed %q", out)
	}
	err := runRun(append([]string{"-m", testdata.Path(t, "models/stories260K/stories260K-Q8_0.gguf")}, args...))
	if err == nil || !strings.Contains(err.Error(), "already quantized") {
		t.Errorf("fp8 on a Q8_0 GGUF: %v, want an error saying it is already quantized", err)
	}
}
