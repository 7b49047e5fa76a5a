package model

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// logitsErr is the relative error of a's logits against b's over all positions.
func logitsErr(a, b [][]float32) float64 {
	var num, den float64
	for i := range b {
		for j := range b[i] {
			d := float64(a[i][j]) - float64(b[i][j])
			num += d * d
			den += float64(b[i][j]) * float64(b[i][j])
		}
	}
	return math.Sqrt(num / den)
}

// fp8Checkpoint writes fm (a BF16 model) to a Hugging Face folder as an FP8 checkpoint:
// the linear layers quantized by QuantizeFP8 and written as F8_E4M3 with weight_scale.
func fp8Checkpoint(t *testing.T, fm *format.Model) *format.Model {
	t.Helper()
	var outs []format.OutTensor
	fp8 := 0
	for _, ft := range fm.Tensors {
		if FP8Linear(ft.Name) {
			q, err := QuantizeFP8(ft)
			if err != nil {
				t.Fatal(err)
			}
			ft, fp8 = q, fp8+1
		}
		outs = append(outs, format.OutTensor{Name: ft.Name, Type: ft.Type, Shape: ft.Shape, Data: ft.Data})
	}
	if fp8 == 0 {
		t.Fatal("no linear layer quantized")
	}
	dir := t.TempDir()
	if err := format.WriteHF(dir, format.Contents{Name: "fp8", Config: fm.Config}, quant.BF16, outs, 0, nil); err != nil {
		t.Fatal(err)
	}
	out, err := format.Open(dir, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	n := 0
	for _, ft := range out.Tensors {
		if ft.Type == quant.FP8 {
			n++
		}
	}
	if n != fp8 {
		t.Fatalf("the FP8 checkpoint reads back %d FP8 tensors, wrote %d", n, fp8)
	}
	return out
}

// TestFP8Weights runs a small Llama with Options.FP8 against its BF16 self: the logits stay
// within FP8's error on random weights (and differ, so the weights were quantized); an FP8 checkpoint of the
// same weights (F8_E4M3 with per-channel weight_scale, read back) gives the logits of
// quantizing at load bit for bit; split over two tensor-parallel ranks (columns of the
// output projections sliced with their row scales) the checkpoint gives the one-rank
// logits to float32 rounding.
func TestFP8Weights(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.BF16, synth.HF)
	prompt, decode := testTokens(9), []int32{3, 77}
	base := fastLogits(t, fm, prompt, decode)
	atLoad := fastLogitsWith(t, fm, Options{Backends: cpuBackends(t, 2, Parallel{}), FP8: true}, prompt, decode)
	e := logitsErr(atLoad, base)
	t.Logf("fp8 vs bf16: logits rel. error %.2e", e)
	// Random weights are FP8's worst case (E4M3 rounds each by up to 1/16, RMS 3.6%, and
	// nothing in them cancels it): measured 7.4e-2 here; real models' perplexity moves by
	// under 0.3% (docs/BENCHMARKS.md).
	if !(e > 0 && e < 0.12) {
		t.Fatalf("fp8 vs bf16: logits rel. error %.3e, want in (0, 0.12)", e)
	}
	ck := fp8Checkpoint(t, fm)
	fromFile := fastLogits(t, ck, prompt, decode)
	if e := logitsErr(fromFile, atLoad); e != 0 {
		t.Fatalf("FP8 checkpoint vs --quantization fp8: logits rel. error %.3e, want 0", e)
	}
	// Options.FP8 leaves an FP8 checkpoint as it is.
	if e := logitsErr(fastLogitsWith(t, ck, Options{Backends: cpuBackends(t, 2, Parallel{}), FP8: true}, prompt, decode), fromFile); e != 0 {
		t.Fatalf("FP8 checkpoint with FP8 set: logits rel. error %.3e, want 0", e)
	}
	par := Parallel{Tensor: 2}
	split := fastLogitsWith(t, ck, Options{Backends: cpuBackends(t, 2, par), Parallel: par}, prompt, decode)
	if e := logitsErr(split, fromFile); !(e < 1e-4) {
		t.Fatalf("FP8 checkpoint on 2 tensor-parallel ranks: logits rel. error %.3e, want < 1e-4", e)
	}
}

// TestFP8RefusesQuantizedModels: Options.FP8 on a GGUF already quantized (Q8_0) is an
// error that says so, not a silent fallback.
func TestFP8RefusesQuantizedModels(t *testing.T) {
	fm, err := format.Open(testdata.Path(t, filepath.Join("models", "stories260K", "stories260K-Q8_0.gguf")), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	_, err = New(fm, Options{Backends: cpuBackends(t, 1, Parallel{}), FP8: true})
	if err == nil || !strings.Contains(err.Error(), "already quantized") || !strings.Contains(err.Error(), "Q8_0") {
		t.Fatalf("FP8 on a Q8_0 GGUF: error %v, want one saying the model is already quantized (Q8_0)", err)
	}
}
