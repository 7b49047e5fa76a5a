package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// captureStderr runs fn with os.Stderr redirected and returns what it printed.
func captureStderr(t *testing.T, fn func()) string { return captureOutput(t, &os.Stderr, fn) }

// numericFlags lists the flags of a command's help (flag.PrintDefaults) whose value is a
// number or a duration, with a negative value of each.
func numericFlags(help string) map[string]string {
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+) (int|int64|float|duration)$`).FindAllStringSubmatch(help, -1) {
		switch {
		case m[2] == "duration":
			flags[m[1]] = "-1s"
		case m[1] == "seed", m[1] == "balance-slack":
			flags[m[1]] = "-2" // -1 is "from the clock", "no slack"
		default:
			flags[m[1]] = "-1"
		}
	}
	return flags
}

// TestNegativeFlagsRefused gives every numeric flag of serve, run, chat and the bench
// commands a negative value: each is refused, naming the flag, before anything loads (a
// trailing argument makes a value that slipped through fail on something else).
func TestNegativeFlagsRefused(t *testing.T) {
	commands := []struct {
		name  string
		run   func([]string) error
		extra []string
	}{
		{"serve", runServe, []string{"extra"}},
		{"run", runRun, []string{"extra"}},
		{"chat", runChat, []string{"extra"}},
		{"bench kernels", func(a []string) error { return runBench(append([]string{"kernels"}, a...)) }, []string{"--types", "nosuch"}},
		{"bench generate", func(a []string) error { return runBench(append([]string{"generate"}, a...)) }, []string{"extra"}},
		{"bench offline", func(a []string) error { return runBench(append([]string{"offline"}, a...)) }, []string{"extra"}},
		{"bench serve", func(a []string) error { return runBench(append([]string{"serve"}, a...)) }, []string{"extra"}},
		{"router", runRouter, []string{"extra"}},
		{"compress", runCompress, []string{"extra"}},
		{"bench compress", func(a []string) error { return runBench(append([]string{"compress"}, a...)) }, []string{"extra"}},
		{"bench sot", func(a []string) error { return runBench(append([]string{"sot"}, a...)) }, []string{"extra"}},
		{"distill", runDistill, []string{"extra"}},
	}
	for _, c := range commands {
		help := captureStderr(t, func() { c.run([]string{"-h"}) })
		flags := numericFlags(help)
		if len(flags) < 3 {
			t.Fatalf("%s: found only the numeric flags %q in its help:\n%s", c.name, flags, help)
		}
		t.Logf("%s: %d numeric flags", c.name, len(flags))
		for name, value := range flags {
			var err error
			captureStderr(t, func() { err = c.run(append([]string{"--" + name, value}, c.extra...)) })
			if err == nil || !strings.Contains(err.Error(), name+" "+value) || !strings.Contains(err.Error(), "negative") && !strings.Contains(err.Error(), "-1 or more") {
				t.Errorf("%s --%s %s: %v, want a refusal naming the flag", c.name, name, value, err)
			}
		}
	}
}

// TestFlagBounds checks the flags whose values beyond a sane bound are refused before
// anything loads: a thread count that would never start, a context length past 32-bit
// positions, sampling values out of range, and -1 where it means "off". (The first two are
// checked with the engine's options, after the arguments: they get none.)
func TestFlagBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"serve", []string{"--threads", "100000"}, "--threads 100000: at most"},
		{"serve", []string{"--max-model-len", "4611686018427387904"}, "at most 2147483647"},
	} {
		var err error
		captureStderr(t, func() { err = commands[c.name].run(c.args) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want an error saying %q", c.name, c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string // "" : the flags pass, and the trailing argument is what fails
	}{
		{[]string{"--temperature", "-0.5"}, "want at least 0"},
		{[]string{"--top-p", "0"}, "want a probability"},
		{[]string{"--min-p", "1.5"}, "want a fraction"},
		{[]string{"--repetition-penalty", "0"}, "want more than 0"},
		{[]string{"--top-k", "-2"}, "want -1 or more"},
		{[]string{"--gpu-memory-utilization", "NaN"}, "want a number"},
		{[]string{"--top-k", "-1", "--seed", "-1", "--threads", "1"}, ""},
	} {
		var err error
		captureStderr(t, func() { err = runRun(append(c.args, "-m", "nosuch.gguf", "extra")) })
		want := c.want
		if want == "" {
			want = `unexpected argument "extra"`
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run %q: %v, want an error saying %q", c.args, err, want)
		}
	}
}
