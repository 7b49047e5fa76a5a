package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/imatrix"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestQuantizeRefuses checks that bad requests fail with a clear error and leave no file.
func TestQuantizeRefuses(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.gguf")
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, []byte(" \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.txt")
	if err := os.WriteFile(short, []byte("Once upon a time"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--dtype", "q4_2"}, "unknown type"},
		{[]string{"--dtype", "q4_0", "--method", "gptx"}, "want rtn, gptq or awq"},
		{[]string{"--dtype", "q4_0", "--method", "gptq"}, "needs --calibration"},
		{[]string{"--dtype", "q4_0", "--method", "awq", "--calibration", empty}, "is empty"},
		{[]string{"--dtype", "q4_0", "--method", "awq", "--calibration", short}, "fewer than one window"},
		{[]string{"--dtype", "q4_0", "--imatrix", empty}, "imatrix"},
		{[]string{"--dtype", "q4_0", "--method", "gptq", "--damp", "0", "--calibration", short}, "want a fraction in (0, 1) or auto"},
		{[]string{"--dtype", "q4_0", "--method", "gptq", "--damp", "automatic", "--calibration", short}, "want a fraction in (0, 1) or auto"},
		{[]string{"--dtype", "q4_1", "--method", "gptq", "--symmetric-clip", "--calibration", short}, "needs --method awq"},
		{[]string{"--dtype", "q4_1", "--method", "awq", "--symmetric-clip", "--no-clip", "--calibration", short}, "without --no-clip"},
	}
	for _, c := range cases {
		_, stderr := runWithIO(t, "", func() error {
			err := runQuantize(append([]string{"-m", model, "-o", out, "--quiet", "--threads", "2"}, c.args...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
			}
			return nil
		})
		_ = stderr
	}
	if err := runQuantize([]string{"-m", model, "-o", filepath.Join(dir, "out.bin"), "--dtype", "q4_0"}); err == nil {
		t.Error("an output not ending in .gguf: no error")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "empty.txt" && e.Name() != "short.txt" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestQuantizeWritesLoadableGGUF quantizes stories260K by each method and checks the
// files: the planned types (ffn_down's 172 columns kept F16, as llama.cpp keeps them), a
// file kvasir opens, and imatrix's output read back by quantize.
func TestQuantizeWritesLoadableGGUF(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	text := testdata.Path(t, "corpus/tinystories_excerpt.txt")
	dir := t.TempDir()
	imat := filepath.Join(dir, "s.dat")
	runWithIO(t, "", func() error {
		if err := runImatrix([]string{"-m", model, "-f", text, "-o", imat, "--chunks", "4", "--threads", "2"}); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	for _, args := range [][]string{
		{"--method", "rtn"},
		{"--method", "rtn", "--imatrix", imat},
		{"--method", "gptq", "--calibration", text, "--calib-tokens", "512"},
		{"--method", "gptq", "--act-order", "--calibration", text, "--calib-tokens", "512"},
		{"--method", "gptq", "--damp", "auto", "--calibration", text, "--calib-tokens", "512"},
		{"--method", "awq", "--calibration", text, "--calib-tokens", "512"},
	} {
		out := filepath.Join(dir, "q.gguf")
		runWithIO(t, "", func() error {
			if err := runQuantize(append([]string{"-m", model, "-o", out, "--dtype", "q4_0", "--quiet", "--threads", "2"}, args...)); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			return nil
		})
		m, err := format.Open(out, format.Options{})
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, tt := range m.Tensors {
			want := quant.Q4_0
			switch {
			case len(tt.Shape) == 1:
				want = quant.F32
			case strings.HasSuffix(tt.Name, "ffn_down.weight"):
				want = quant.F16
			case tt.Name == "output.weight":
				want = quant.Q8_0 // Q6_K, as llama.cpp gives the output, does not fit 64 columns
			}
			if tt.Type != want {
				t.Errorf("%v: %s is %s, want %s", args, tt.Name, tt.Type, want)
			}
		}
		m.Close()
	}
}

// TestImatrixMatchesLlamaCpp checks kvasir imatrix against llama.cpp's llama-imatrix (build
// c392e50, CPU) run on stories260K.gguf over tinystories_excerpt.txt with -c 128 --chunks 64:
// the stored values of the first channels of blk.0.attn_q.weight and blk.4.ffn_down.weight,
// and the call counts.
func TestImatrixMatchesLlamaCpp(t *testing.T) {
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	text := testdata.Path(t, "corpus/tinystories_excerpt.txt")
	out := filepath.Join(t.TempDir(), "k.dat")
	runWithIO(t, "", func() error {
		if err := runImatrix([]string{"-m", model, "-f", text, "-o", out, "--ctx", "128", "--chunks", "64", "--threads", "2"}); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	f, err := imatrix.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{ // llama-imatrix's stored values
		"blk.0.attn_q.weight":   {27.013981, 31.484207, 23.537556},
		"blk.4.ffn_down.weight": {13.05253, 14.11684, 11.73001},
	}
	if len(f.Entries) != 35 || f.LastChunk != 64 {
		t.Fatalf("%d entries after %d chunks, llama.cpp wrote 35 after 64", len(f.Entries), f.LastChunk)
	}
	for _, e := range f.Entries {
		w, ok := want[e.Name]
		if !ok {
			continue
		}
		if e.NCall != 64 {
			t.Errorf("%s: ncall %d, llama.cpp 64", e.Name, e.NCall)
		}
		for i, v := range w {
			if math.Abs(float64(e.Values[i]/v-1)) > 2e-3 {
				t.Errorf("%s value %d: %g, llama.cpp %g", e.Name, i, e.Values[i], v)
			}
		}
	}
}
