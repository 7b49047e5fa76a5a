package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// captureStdout runs fn with os.Stdout redirected and returns what it printed.
func captureStdout(t *testing.T, fn func() error) string {
	t.Helper()
	var runErr error
	out := captureOutput(t, &os.Stdout, func() { runErr = fn() })
	if runErr != nil {
		t.Fatal(runErr)
	}
	return out
}

// captureOutput runs fn with *file (os.Stdout, os.Stderr) redirected and returns what it
// printed there.
func captureOutput(t *testing.T, file **os.File, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := *file
	*file = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	fn()
	*file = old
	w.Close()
	return <-done
}

// storiesRun returns the stories260K checkpoint and tokenizer paths and llama2.c's greedy
// text of 200 tokens.
func storiesRun(t *testing.T) (bin, tok, want string) {
	t.Helper()
	bin = testdata.Path(t, "models/stories260K/stories260K.bin")
	tok = testdata.Path(t, "models/stories260K/tok512.bin")
	b, err := os.ReadFile(testdata.Path(t, "models/stories260K/ref_runc_greedy200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return bin, tok, string(b)
}

// TestRunGreedyStories: `kvasir run` with temperature 0 and no prompt prints llama2.c's
// greedy text.
func TestRunGreedyStories(t *testing.T) {
	bin, tok, want := storiesRun(t)
	got := captureStdout(t, func() error {
		return runRun([]string{"-m", bin, "-z", tok, "--temperature", "0", "-n", "200", "--threads", "1"})
	})
	if strings.TrimSuffix(got, "\n") != want {
		t.Errorf("kvasir run printed\n%q\nwant\n%q", got, want)
	}
	// With a prompt, the echoed prompt and the continuation join up.
	got = captureStdout(t, func() error {
		return runRun([]string{"-m", bin, "-z", tok, "--temperature", "0", "-n", "5", "-p", "Once upon a"})
	})
	if !strings.HasPrefix(got, "Once upon a time,") {
		t.Errorf("kvasir run -p printed %q", got)
	}
}

// TestRunKVCacheDType: `kvasir run --kv-cache-dtype f16` still prints llama2.c's greedy
// text for stories260K (the F16 cache's rounding moves no greedy token there), `int8` and
// `fp8` run, and a type the CPU cache does not hold, or no type at all, is refused before
// anything runs.
func TestRunKVCacheDType(t *testing.T) {
	bin, tok, want := storiesRun(t)
	got := captureStdout(t, func() error {
		return runRun([]string{"-m", bin, "-z", tok, "--temperature", "0", "-n", "200", "--kv-cache-dtype", "f16"})
	})
	if strings.TrimSuffix(got, "\n") != want {
		t.Errorf("kvasir run --kv-cache-dtype f16 printed\n%q\nwant\n%q", got, want)
	}
	for _, q := range []string{"int8", "q8_0", "fp8", "fp8_e5m2"} {
		got := captureStdout(t, func() error {
			return runRun([]string{"-m", bin, "-z", tok, "--temperature", "0", "-n", "20", "--kv-cache-dtype", q})
		})
		if len(got) < 40 {
			t.Errorf("kvasir run --kv-cache-dtype %s printed %q", q, got)
		}
	}
	for _, bad := range []string{"bf16", "q4_0", "half", "fp4"} {
		err := runRun([]string{"-m", bin, "-z", tok, "-n", "1", "--kv-cache-dtype", bad})
		if err == nil || !strings.Contains(err.Error(), "--kv-cache-dtype") {
			t.Errorf("--kv-cache-dtype %s: error %v, want one naming the flag", bad, err)
		}
	}
}

// TestBenchGenerateJSON: `kvasir bench generate --json` prints one object with the figures.
func TestBenchGenerateJSON(t *testing.T) {
	gguf := testdata.Path(t, "models/stories260K/stories260K.gguf")
	out := captureStdout(t, func() error {
		return runBench([]string{"generate", "-m", gguf, "--prompt-len", "16", "--gen-len", "8", "--threads", "2", "--json"})
	})
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"prefill_tokens_per_s", "decode_tokens_per_s", "decode_gb_per_s", "probe_gb_per_s", "decode_bandwidth_ratio"} {
		if f, ok := res[k].(float64); !ok || f <= 0 {
			t.Errorf("%s = %v, want a positive figure", k, res[k])
		}
	}
	// Energy is measured or says why not, whatever this machine has.
	e, _ := res["energy"].(map[string]any)
	if avail, _ := e["available"].(bool); avail {
		// (A counter may not tick within a few milliseconds of decoding: 0 J is possible.)
		if j, ok := e["joules_per_output_token"].(float64); !ok || j < 0 || e["output_tokens"] != 8.0 {
			t.Errorf("energy %v", e)
		}
	} else if reason, _ := e["reason"].(string); reason == "" {
		t.Errorf("energy %v: neither measured nor a reason", res["energy"])
	}
}

func TestBenchDispatch(t *testing.T) {
	if err := runBench([]string{"no-such-benchmark"}); err == nil {
		t.Error("an unknown benchmark was accepted")
	}
	for _, name := range []string{"kernels", "generate"} {
		if _, ok := benchmarks[name]; !ok {
			t.Errorf("benchmark %q is not registered", name)
		}
	}
}

// captureOutputErr runs fn with os.Stdout redirected and returns what it printed and fn's
// error.
func captureOutputErr(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	var err error
	out := captureOutput(t, &os.Stdout, func() { err = fn() })
	return out, err
}
