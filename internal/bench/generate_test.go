package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestGenerate: bench generate times stories260K split across two CPU ranks and reports
// the threads, kernel set and split of the backends the assembly made.
func TestGenerate(t *testing.T) {
	fm, err := format.Open(testdata.Path(t, "models/stories260K/stories260K.gguf"), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvasir.Load(fm, kvasir.Options{Threads: 2, TensorParallel: 2, CPUKernels: "generic"})
	if err != nil {
		fm.Close()
		t.Fatal(err)
	}
	defer l.Close()
	res, err := Generate(l, GenerateOptions{PromptLen: 16, GenLen: 8, Chunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.Threads != 1 || res.KernelSet != "generic" || res.TensorParallel != 2 || res.PipelineParallel != 1 || res.PromptLen != 16 || res.GenLen != 8 {
		t.Errorf("result %+v", res)
	}
	if res.PrefillTokensPerS <= 0 || res.DecodeTokensPerS <= 0 || res.ProbeGBPerS <= 0 || res.WeightBytesPerToken <= 0 || res.DecodeBWRatio <= 0 {
		t.Errorf("figures %+v", res)
	}
	var b bytes.Buffer
	WriteGenerate(&b, res)
	if !strings.HasPrefix(b.String(), "model:   stories260K.gguf (llama), 1 threads, generic kernels, split across 2 ranks (tensor-parallel 2 x pipeline-parallel 1)\nprefill: 16 tokens in ") {
		t.Errorf("report:\n%s", b.String())
	}
	if _, err := Generate(l, GenerateOptions{PromptLen: 0, GenLen: 8}); err == nil {
		t.Error("an empty prompt accepted")
	}
}

// TestKernels: bench kernels measures each type asked on the pool, and its JSON keeps the
// keys and their order of the map it used to print.
func TestKernels(t *testing.T) {
	p, err := kvasir.NewCPUPool(kvasir.Options{Threads: 1, CPUKernels: "generic"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := Kernels(p, KernelsOptions{Rows: 16, Cols: 100, Tokens: 2, Types: []quant.Type{quant.F32}}); err == nil {
		t.Error("columns that are not a multiple of 256 accepted")
	}
	res, err := Kernels(p, KernelsOptions{Rows: 64, Cols: 256, Tokens: 4, Types: []quant.Type{quant.Q8_0}, Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Threads != 1 || res.KernelSet != "generic" || len(res.Kernels) != 1 || res.Kernels[0].Type != "Q8_0" ||
		res.Kernels[0].WeightBytes != 64*272 || res.Kernels[0].MatVecGBPerS <= 0 || res.Kernels[0].GEMMGFLOPPerS <= 0 {
		t.Errorf("result %+v", res)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.Token() // {
	for dec.More() {
		k, _ := dec.Token()
		order = append(order, k.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	want := "cols gemm_tokens kernel_set kernels probe_gb_per_s rows threads"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("JSON keys %q, want %q", got, want)
	}
	var b bytes.Buffer
	WriteKernels(&b, res)
	if !strings.Contains(b.String(), "type      weight MB    matvec GB/s   of probe  GEMM x4 GFLOP/s\nQ8_0  ") {
		t.Errorf("report:\n%s", b.String())
	}
}

func TestSplitInfo(t *testing.T) {
	for _, tc := range []struct {
		tp, pp int
		want   string
	}{
		{1, 1, ""}, {0, 0, ""}, {2, 1, ", split across 2 ranks (tensor-parallel 2 x pipeline-parallel 1)"},
		{2, 2, ", split across 4 ranks (tensor-parallel 2 x pipeline-parallel 2)"},
	} {
		if got := SplitInfo(tc.tp, tc.pp); got != tc.want {
			t.Errorf("SplitInfo(%d, %d) = %q, want %q", tc.tp, tc.pp, got, tc.want)
		}
	}
}
