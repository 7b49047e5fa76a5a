//go:build linux

package abuse

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSmallerItems replays the smaller items of the table: the queue limit on an idle
// server, a secret in serve's help, flag values that overflow, hang or are negative, and a
// second SIGTERM.
func TestSmallerItems(t *testing.T) {
	base := commandBaseline(t)
	model := trapModel(t)
	serve := func(flags ...string) []string {
		return append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "-m", model}, flags...)
	}
	runCase(t, "more_prompts_than_max_waiting_on_an_idle_server", func(c *check) { idleQueue(c, model) })
	runCase(t, "serve_help_hides_the_api_key", func(c *check) {
		const canary = "abuse-canary-secret-4711"
		r, err := runCommand(caseTime+commandSlack, []string{"KVASIR_API_KEY=" + canary}, "serve", "-h")
		if err != nil {
			c.Fatalf("%v", err)
		}
		if strings.Contains(r.output, canary) {
			c.Errorf("serve -h prints the value of $KVASIR_API_KEY:\n%s", tail(r.output, 1500))
		}
	})
	runCase(t, "max_model_len_2^62", func(c *check) {
		refuse(c, refusedCommand{args: serve("--max-model-len", fmt.Sprint(int64(1)<<62)), mentions: regexp.MustCompile(`max-model-len`)}, base)
	})
	runCase(t, "threads_100000", func(c *check) {
		refuse(c, refusedCommand{args: serve("--threads", "100000"), mentions: regexp.MustCompile(`threads`)}, base)
	})
	runCase(t, "second_sigterm_exits_at_once", func(c *check) { secondSignal(c, model) })
	for _, n := range negativeFlags(model) {
		runCase(t, "negative_"+n.name, func(c *check) { refuse(c, n, base) })
	}
}

// negativeFlags are commands given one negative numeric flag each, which must refuse it,
// naming the flag, instead of taking the default.
func negativeFlags(model string) []refusedCommand {
	var out []refusedCommand
	add := func(name string, cmd []string, flag, value string) {
		out = append(out, refusedCommand{
			name:     name + "_" + flag,
			args:     append(append([]string{}, cmd...), "--"+flag, value),
			mentions: regexp.MustCompile(regexp.QuoteMeta(flag)),
		})
	}
	serve := []string{"serve", "--host", "127.0.0.1", "--port", "0", "-m", model}
	for _, f := range []string{"threads", "block-size", "max-model-len", "max-num-seqs", "max-num-batched-tokens", "max-waiting", "max-request-bytes"} {
		add("serve", serve, f, "-1")
	}
	add("serve", serve, "drain-timeout", "-1s")
	run := []string{"run", "-p", "Once", "-m", model}
	add("run", run, "n", "-5")
	add("run", run, "max-num-seqs", "-1")
	chat := []string{"chat", "-m", model}
	add("chat", chat, "n", "-5")
	add("chat", chat, "ctx", "-1")
	offline := []string{"bench", "offline", "-m", model}
	for _, f := range []string{"num-prompts", "input-len", "output-len", "max-concurrency"} {
		add("bench_offline", offline, f, "-1")
	}
	return out
}

// idleQueue asks a server allowed 2 waiting requests for 16 prompts at once while it is
// idle: it can always take them (they are admitted as a whole), so it must not answer 429.
func idleQueue(c *check, model string) {
	s, err := startServer("-m", model, "--max-waiting", "2")
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer s.stop()
	h := hostile{path: "/v1/completions"}
	const prompts = 16
	a := h.send(s, `{"prompt":`+manyPrompts(prompts)+`,"max_tokens":4}`)
	if a.err != nil || a.status != http.StatusOK {
		c.Fatalf("%d prompts, --max-waiting 2, an idle server: status %d (%v), want 200: %s", prompts, a.status, a.err, tail(string(a.body), 500))
	}
	var res struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(a.body, &res); err != nil || len(res.Choices) != prompts {
		c.Errorf("want %d choices (%v): %s", prompts, err, tail(string(a.body), 500))
	}
}

// secondSignal holds a request in flight (a body that stalls), sends SIGTERM (the server
// drains, for up to its 30 s drain timeout), then a second SIGTERM: the server must exit at
// once.
func secondSignal(c *check, model string) {
	s, err := startServer("-m", model, "--drain-timeout", "30s")
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer s.stop()
	conn, err := dialRaw(s, 0)
	if err != nil {
		c.Fatalf("%v", err)
	}
	defer conn.Close()
	fmt.Fprint(conn, requestHead(s, "/v1/completions", 1000, "")+`{"prompt":`)
	time.Sleep(100 * time.Millisecond)
	if err := s.signal(syscall.SIGTERM); err != nil {
		c.Fatalf("SIGTERM: %v", err)
	}
	if s.waitExit(300 * time.Millisecond) {
		c.Fatalf("the server exited on the first SIGTERM with a request in flight (%v): the drain did not wait", s.exitErr)
	}
	if err := s.signal(syscall.SIGTERM); err != nil {
		c.Fatalf("second SIGTERM: %v", err)
	}
	start := time.Now()
	if !s.waitExit(caseTime) {
		c.Errorf("still draining %v after the second SIGTERM, want an exit at once", time.Since(start).Round(time.Millisecond))
	}
}
