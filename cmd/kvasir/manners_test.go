package main

import (
	"flag"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUnknownFlagSuggests: a mistyped flag is refused naming the flag meant; one far from
// every flag is refused without a guess; values of flags (even ones starting with -) are
// not taken for flags.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kv-cache-memry", "2GiB"}, "unknown flag --kv-cache-memry: did you mean --kv-cache-memory?"},
		{[]string{"--prot", "8001"}, "did you mean --port?"},
		{[]string{"--port", "8001", "-M", "x.gguf"}, "unknown flag -M: did you mean -m?"},
		{[]string{"--allowed-origin=*"}, "did you mean --allowed-origins?"},
		{[]string{"--zzzzzzzzzz"}, "unknown flag --zzzzzzzzzz (kvasir serve -h lists the flags)"},
	} {
		var err error
		captureStderr(t, func() { err = runServe(c.args) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %q: %v, want %q", c.args, err, c.want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("seed", 0, "")
	fs.Bool("json", false, "")
	if err := checkUnknownFlags(fs, []string{"--seed", "-1", "--json", "file", "--nosuch"}); err != nil {
		t.Errorf("a value or an argument taken for a flag: %v", err)
	}
	if err := checkUnknownFlags(fs, []string{"--json", "--sed", "1"}); err == nil || !strings.Contains(err.Error(), "--seed") {
		t.Errorf("after a bool flag: %v", err)
	}
}

// TestEditDistance: insertions, deletions, substitutions and swaps count one each.
func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"port", "port", 0}, {"prot", "port", 1}, {"kv-cache-memry", "kv-cache-memory", 1}, {"", "abc", 3}, {"abc", "", 3}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestVersionLine: --version names kvasir, the Go version and the platform.
func TestVersionLine(t *testing.T) {
	v := versionLine()
	if !strings.HasPrefix(v, "kvasir ") || !strings.Contains(v, "go1.") || !strings.Contains(v, "linux/") && !strings.Contains(v, "darwin/") {
		t.Errorf("version line %q", v)
	}
}

// TestBusyPortFailsFast: serve on a port that is taken fails before the model loads, saying
// so and what to do.
func TestBusyPortFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	start := time.Now()
	var serr error
	out := captureStderr(t, func() { serr = runServe([]string{"--port", port, "-m", "synth:smollm2-135m"}) })
	if serr == nil || !strings.Contains(serr.Error(), "port "+port+" on 127.0.0.1 is already in use") || !strings.Contains(serr.Error(), "--port") {
		t.Fatalf("serve on a busy port: %v", serr)
	}
	if strings.Contains(out, "engine ready") || time.Since(start) > 5*time.Second {
		t.Errorf("the model loaded (%v) before the port was checked:\n%s", time.Since(start), out)
	}
}

// TestByteSizeFlags: size flags take units, show their defaults with one, and refuse what
// is not a size.
func TestByteSizeFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var body int64
	var stop int
	bytesVar(fs, &body, "max-request-bytes", 10<<20, "body")
	intBytesVar(fs, &stop, "max-stop-bytes", 16384, "stops")
	if got := fs.Lookup("max-request-bytes").DefValue; got != "10MiB" {
		t.Errorf("default shown as %q", got)
	}
	if err := fs.Parse([]string{"--max-request-bytes", "2GiB", "--max-stop-bytes", "1.5KiB"}); err != nil || body != 2<<30 || stop != 1536 {
		t.Errorf("parsed %d %d: %v", body, stop, err)
	}
	for _, bad := range []string{"-1", "lots", "1XB"} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		bytesVar(fs, &body, "b", 0, "")
		fs.SetOutput(new(strings.Builder))
		if err := fs.Parse([]string{"--b", bad}); err == nil {
			t.Errorf("--b %s accepted", bad)
		}
	}
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1KiB", 3 << 30: "3GiB", 1536: "1536"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// FuzzCheckUnknownFlags feeds arbitrary argument lists (NUL-separated) to the unknown-flag
// check: it never panics, and when it lets the arguments through, the flag package finds no
// undefined flag in them either.
func FuzzCheckUnknownFlags(f *testing.F) {
	for _, seed := range []string{"--port\x008000", "--prot\x008000", "-m\x00x\x00--json", "--seed=-1\x00--", "---x", "-", "--=", "--json=true\x00arg\x00--nope"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		fs.Int("port", 0, "")
		fs.String("m", "", "")
		fs.Bool("json", false, "")
		err := checkUnknownFlags(fs, args)
		if perr := fs.Parse(args); err == nil && perr != nil && strings.Contains(perr.Error(), "not defined") {
			t.Errorf("%q let through, but flag says %v", args, perr)
		}
	})
}

// TestKVCacheMemoryUnits: --kv-cache-memory takes a unit in every command that has it
// (serve, run, chat, bench offline share the engine flags), and a bad one is refused naming
// the flag before anything loads.
func TestKVCacheMemoryUnits(t *testing.T) {
	fs := newFlags("bench offline", "")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := fs.Parse([]string{"--kv-cache-memory", "2GiB"}); err != nil {
		t.Fatal(err)
	}
	if opt, err := ef.options(); err != nil || opt.KVCacheMemory != 2<<30 {
		t.Errorf("--kv-cache-memory 2GiB: %d, %v", opt.KVCacheMemory, err)
	}
	var err error
	captureStderr(t, func() {
		err = runBench([]string{"offline", "-m", "synth:smollm2-135m", "--num-prompts", "1", "--input-len", "4", "--output-len", "1", "--kv-cache-memory", "2XiB"})
	})
	if err == nil || !strings.Contains(err.Error(), "--kv-cache-memory") {
		t.Errorf("bench offline --kv-cache-memory 2XiB: %v", err)
	}
}

// TestPositionalModel: the model may come first as an argument, with flags before or after
// it; -m and another positional model together are refused.
func TestPositionalModel(t *testing.T) {
	parse := func(args ...string) (*engineFlags, *flag.FlagSet, *int, error) {
		fs := newFlags("serve", "")
		port := fs.Int("port", 8000, "")
		ef := addEngineFlags(fs, allEngineFlags)
		return ef, fs, port, ef.parse(fs, args)
	}
	for _, args := range [][]string{
		{"model.gguf", "--port", "8001", "--kv-cache-memory", "1GiB"},
		{"--port", "8001", "model.gguf", "--kv-cache-memory", "1GiB"},
		{"-m", "model.gguf", "--port", "8001", "--kv-cache-memory", "1GiB"},
		{"-m", "model.gguf", "model.gguf", "--port", "8001", "--kv-cache-memory", "1GiB"},
	} {
		ef, fs, port, err := parse(args...)
		if err != nil || ef.model != "model.gguf" || *port != 8001 || ef.kvMemory != "1GiB" || fs.NArg() != 0 {
			t.Errorf("%q: model %q, port %d, kv %q, %d args left, %v", args, ef.model, *port, ef.kvMemory, fs.NArg(), err)
		}
	}
	if _, _, _, err := parse("-m", "a.gguf", "b.gguf"); err == nil || !strings.Contains(err.Error(), "two models") {
		t.Errorf("two models: %v", err)
	}
	if _, fs, _, err := parse("a.gguf", "b.gguf"); err != nil || fs.NArg() != 1 {
		t.Errorf("a second positional argument is left for the command to refuse: %v, %d", err, fs.NArg())
	}
	if _, _, _, err := parse("a.gguf", "--prot", "1"); err == nil || !strings.Contains(err.Error(), "did you mean --port?") {
		t.Errorf("a mistyped flag after the model: %v", err)
	}
}
