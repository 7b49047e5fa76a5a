package main

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestSpeculativeConfigFlag: --speculative-config is parsed with the engine flags, before
// anything is loaded; a bad one is an error naming the flag.
func TestSpeculativeConfigFlag(t *testing.T) {
	parse := func(args ...string) (*engineFlags, error) {
		fs := newFlags("test", "")
		ef := addEngineFlags(fs, allEngineFlags)
		return ef, fs.Parse(args)
	}
	ef, err := parse("--speculative-config", `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}`)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := ef.options()
	if err != nil {
		t.Fatal(err)
	}
	if c := opt.Speculative; c == nil || c.Method != kvasir.SpecNGram || c.NumSpeculativeTokens != 3 || c.PromptLookupMin != 4 {
		t.Errorf("parsed %+v", c)
	}
	ef, _ = parse()
	if opt, err := ef.options(); err != nil || opt.Speculative != nil {
		t.Errorf("no flag: %+v, %v", opt.Speculative, err)
	}
	ef, _ = parse("--speculative-config", `{"method": "ngram", "num_speculative_tokens": 32}`)
	if _, err := ef.options(); err == nil || !strings.HasPrefix(err.Error(), "--speculative-config: speculative config: num_speculative_tokens 32") {
		t.Errorf("K 32: %v", err)
	}
}

// TestRunSpeculative: `kvasir run` with an ngram config prints what it prints without
// (greedy; stories260K in Q8_0, whose steps give the same bits for any token count).
func TestRunSpeculative(t *testing.T) {
	m := testdata.Path(t, "models/stories260K/stories260K-Q8_0.gguf")
	args := []string{"-m", m, "-p", "Once upon a time", "--temperature", "0", "-n", "80", "--threads", "1"}
	plain := captureStdout(t, func() error { return runRun(args) })
	spec := captureStdout(t, func() error {
		return runRun(append(args, "--speculative-config", `{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`))
	})
	if spec != plain || len(plain) < 100 {
		t.Errorf("with ngram:\n%q\nwithout:\n%q", spec, plain)
	}
}

// TestKVPolicyFlag: --kv-policy is parsed and checked with the engine flags; a bad one is
// an error naming the flag and the reason.
func TestKVPolicyFlag(t *testing.T) {
	options := func(args ...string) (kvasir.Options, error) {
		fs := newFlags("test", "")
		ef := addEngineFlags(fs, allEngineFlags)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return ef.options()
	}
	opt, err := options("--kv-policy", "streaming:budget_tokens=128,sink_tokens=4")
	if err != nil {
		t.Fatal(err)
	}
	if p := opt.KVPolicy; p.Name != "streaming" || p.BudgetTokens != 128 || p.SinkTokens != 4 || p.WindowTokens != kvasir.KVPolicyUnset {
		t.Errorf("parsed %+v", p)
	}
	if opt, err := options(); err != nil || opt.KVPolicy.Name != "full" {
		t.Errorf("default: %+v, %v", opt.KVPolicy, err)
	}
	for arg, reason := range map[string]string{
		"lru":                        "unknown kv policy",
		"streaming:budget_tokens=6x": "not a non-negative integer",
		"streaming:budget_tokens=64,window_tokens=100": "below sink_tokens",
	} {
		if _, err := options("--kv-policy", arg); err == nil || !strings.HasPrefix(err.Error(), "--kv-policy: ") || !strings.Contains(err.Error(), reason) {
			t.Errorf("--kv-policy %s: %v, want an error saying %q", arg, err, reason)
		}
	}
}

// TestSparse2of4Flag: --sparse-2of4 reaches Options.CUDA for the commands that load a
// model (bench generate's load flags too), auto by default; a bad value is an error naming
// the flag before anything is loaded.
func TestSparse2of4Flag(t *testing.T) {
	for _, scope := range []flagScope{loadFlags, allEngineFlags} {
		options := func(args ...string) (kvasir.Options, error) {
			fs := newFlags("test", "")
			ef := addEngineFlags(fs, scope)
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			return ef.options()
		}
		for args, want := range map[string]string{"": "off", "on": "on", "off": "off", "auto": "auto"} {
			var a []string
			if args != "" {
				a = []string{"--sparse-2of4", args}
			}
			opt, err := options(a...)
			if err != nil || opt.CUDA.Sparse2of4 != want {
				t.Errorf("scope %d, --sparse-2of4 %q: %q, %v; want %q", scope, args, opt.CUDA.Sparse2of4, err, want)
			}
		}
		if _, err := options("--sparse-2of4", "yes"); err == nil || !strings.HasPrefix(err.Error(), "--sparse-2of4: ") || !strings.Contains(err.Error(), "auto, on or off") {
			t.Errorf("scope %d, --sparse-2of4 yes: %v", scope, err)
		}
	}
}
