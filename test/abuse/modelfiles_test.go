//go:build linux

package abuse

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
)

// commandSlack is how long past its bound a command that must refuse its input may run
// before the suite kills it (so that its lateness is measured, in seconds on an unfixed
// tree).
const commandSlack = 2 * time.Second

// refusedCommand is a command that must exit with an error naming what it refuses.
type refusedCommand struct {
	name string
	env  []string
	args []string
	// within is how long it may take (caseTime when 0).
	within time.Duration
	// mentions must match its output: the field or flag it refuses.
	mentions *regexp.Regexp
}

// commandBaseline is the peak memory of `kvasir inspect` on the sane model: what the binary
// costs before any hostile input.
func commandBaseline(t *testing.T) int64 {
	r, err := runCommand(caseTime+commandSlack, nil, "inspect", ggufModel(t))
	if err != nil || r.exitCode != 0 {
		t.Fatalf("kvasir inspect on the sane model: %v %v", err, r)
	}
	t.Logf("kvasir inspect on the sane model: peak %s", mib(r.peak))
	return r.peak
}

// refuse runs rc and checks it exits with an error (not killed, not serving) within its
// time, at most caseMemory over base, naming what it refuses.
func refuse(c *check, rc refusedCommand, base int64) {
	within := rc.within
	if within == 0 {
		within = caseTime
	}
	r, err := runCommand(within+commandSlack, rc.env, rc.args...)
	if err != nil {
		c.Fatalf("%v", err)
	}
	c.Logf("%s", r)
	switch {
	case r.killed != "":
		c.Fatalf("not refused: %s", r.killed)
	case r.exitCode == 0:
		c.Fatalf("exit status 0, want an error")
	}
	if r.wall > within {
		c.Errorf("refused after %v, want under %v", r.wall.Round(time.Millisecond), within)
	}
	if extra := r.peak - base; extra > caseMemory {
		c.Errorf("peak memory %s, %s over the sane model's inspect, want under %s", mib(r.peak), mib(extra), mib(caseMemory))
	}
	if msg := errorMessage(r.output, rc.args[0]); !rc.mentions.MatchString(msg) {
		c.Errorf("the error does not name the field (want %v): %q", rc.mentions, msg)
	}
}

// errorMessage is the error a kvasir command printed last ("kvasir CMD: ..." to the end),
// not the usage text before it, which names every flag.
func errorMessage(output, cmd string) string {
	prefix := "kvasir " + cmd
	i := strings.LastIndex(output, "\n"+prefix)
	if i < 0 {
		if strings.HasPrefix(output, prefix) {
			return output
		}
		return ""
	}
	return output[i+1:]
}

// TestModelFiles gives `kvasir serve -m` and `kvasir inspect` model files whose headers ask
// for absurd layer counts (a 0.7 MiB GGUF claiming 1e6 and 2^62 blocks; a Hugging Face
// config claiming 1e7 layers): each must be refused at once, before anything is allocated
// per layer.
func TestModelFiles(t *testing.T) {
	base := commandBaseline(t)
	src := ggufModel(t)
	layersGGUF := regexp.MustCompile(`(?i)block_count|layers`)
	files := []struct {
		name, path string
		mentions   *regexp.Regexp
	}{
		{"gguf_block_count_1e6", writeGGUF(t, src, "layers-1e6.gguf", map[string]gguf.Value{"llama.block_count": gguf.Uint32(1_000_000)}), layersGGUF},
		{"gguf_block_count_2^62", writeGGUF(t, src, "layers-2e62.gguf", map[string]gguf.Value{"llama.block_count": gguf.Uint64(1 << 62)}), layersGGUF},
		{"hf_num_hidden_layers_1e7", writeHFFolder(t, hfModel(t), map[string]any{"num_hidden_layers": 10_000_000}), regexp.MustCompile(`(?i)num_hidden_layers|layers`)},
	}
	for _, f := range files {
		for _, cmd := range []refusedCommand{
			{name: "serve_" + f.name, args: []string{"serve", "--host", "127.0.0.1", "--port", "0", "-m", f.path}, mentions: f.mentions},
			{name: "inspect_" + f.name, args: []string{"inspect", f.path}, mentions: f.mentions},
		} {
			runCase(t, cmd.name, func(c *check) { refuse(c, cmd, base) })
		}
	}
}
