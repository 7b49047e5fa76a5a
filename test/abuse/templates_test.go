//go:build linux

package abuse

import (
	"fmt"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
)

// templateLoadTime bounds how long `kvasir serve` may take to refuse a chat template that
// cannot render a trivial conversation: the render deadline it tries it under, and the
// start.
const templateLoadTime = 3 * time.Second

// TestTemplates gives the server chat templates that misbehave on every conversation, in
// the model file and through --chat-template: it must refuse them at load, naming the
// template. (The templates that misbehave only on some request are TestRequests' cases.)
// A render that runs away must not block the drain either.
func TestTemplates(t *testing.T) {
	base := commandBaseline(t)
	src := ggufModel(t)
	mentions := regexp.MustCompile(`(?i)template`)
	for _, name := range []string{"recursion", "repeat", "range"} {
		tmpl := hostileTemplates[name]
		inFile := writeGGUF(t, src, name+".gguf", map[string]gguf.Value{"tokenizer.chat_template": gguf.String(tmpl)})
		flagFile := writeFile(t, name+".jinja", tmpl)
		for _, rc := range []refusedCommand{
			{name: "gguf_" + name + "_refused_at_load", args: []string{"serve", "--host", "127.0.0.1", "--port", "0", "-m", inFile}},
			{name: "chat_template_flag_" + name + "_refused_at_load", args: []string{"serve", "--host", "127.0.0.1", "--port", "0", "-m", src, "--chat-template", flagFile}},
		} {
			rc.within, rc.mentions = templateLoadTime, mentions
			runCase(t, rc.name, func(c *check) { refuse(c, rc, base) })
		}
	}
	trap := trapModel(t)
	runCase(t, "runaway_render_does_not_block_the_drain", func(c *check) { drainDuringRender(c, trap) })
}

// drainDuringRender starts a chat whose render loops 1e8 times, then SIGTERM: the server
// must drain and exit by itself within its drain timeout.
func drainDuringRender(c *check, model string) {
	const drain = 2 * time.Second
	s, err := startServer("-m", model, "--drain-timeout", drain.String())
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer s.stop()
	h := hostile{path: "/v1/chat/completions"}
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":4}`, triggerRange)
	go h.send(s, body)
	time.Sleep(200 * time.Millisecond)
	if err := s.signal(syscall.SIGTERM); err != nil {
		c.Fatalf("SIGTERM: %v", err)
	}
	start := time.Now()
	if !s.waitExit(drain + caseTime) {
		c.Fatalf("still running %v after SIGTERM (drain timeout %v)", time.Since(start).Round(time.Millisecond), drain)
	}
	if s.why != "" || s.exitErr != nil {
		c.Errorf("the server did not exit cleanly after SIGTERM: %v %s\n%s", s.exitErr, s.why, tail(s.logs.String(), 2000))
	}
}
