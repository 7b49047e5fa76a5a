package main

import (
	"bufio"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// stopAfter is a writer that calls stop once it has taken n writes.
type stopAfter struct {
	mu   sync.Mutex
	n    int
	stop func() bool
	b    strings.Builder
}

func (s *stopAfter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if s.n--; s.n == 0 {
		s.stop()
	}
	return len(p), nil
}

// TestChatSession: the chat's commands and turns on the synthesized model: a message gets a
// reply kept in the conversation, /clear forgets it but the system prompt, an unknown
// command is not sent, an interrupted answer stops early and the chat goes on, /exit ends it.
func TestChatSession(t *testing.T) {
	fs := newFlags("chat", "")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := ef.parse(fs, []string{"synth:smollm2-135m", "--kv-cache-memory", "64MiB", "--threads", "2"}); err != nil {
		t.Fatal(err)
	}
	var e *kvasir.Engine
	var err error
	captureStderr(t, func() { e, err = openGenerator(ef, nil) })
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tmpl, closeTemplate, err := chatTemplate(e)
	if err != nil {
		t.Fatal(err)
	}
	defer closeTemplate()
	var out, info strings.Builder
	params := e.SamplingDefaults().Params()
	params.IgnoreEOS = true
	c := &chatSession{e: e, tmpl: tmpl, system: "be brief", params: params, maxReply: 40, tok: e.Loaded().Tokenizer(), out: &out, info: &info}
	c.clear()
	step := func(line string, more bool) {
		t.Helper()
		got, err := c.handle(line)
		if err != nil || got != more {
			t.Fatalf("%q: %v, %v", line, got, err)
		}
	}
	step("hello", true)
	if len(c.msgs) != 3 || c.msgs[2].Role != "assistant" || c.msgs[2].Content == "" {
		t.Fatalf("conversation after a turn: %+v", c.msgs)
	}
	if !strings.Contains(info.String(), "40 reply tokens") {
		t.Errorf("turn note: %q", info.String())
	}
	step("/clear", true)
	if len(c.msgs) != 1 || c.msgs[0].Role != "system" {
		t.Fatalf("after /clear: %+v", c.msgs)
	}
	step("/nosuch", true)
	step("", true)
	if len(c.msgs) != 1 || !strings.Contains(info.String(), "unknown command /nosuch") {
		t.Fatalf("an unknown command or an empty line was sent: %+v\n%s", c.msgs, info.String())
	}
	stopper := &stopAfter{n: 3, stop: c.interrupt}
	c.out = stopper
	step("tell me a long story", true)
	if !strings.Contains(info.String(), "[stopped; ") || len(c.msgs) != 3 {
		t.Fatalf("an interrupted answer: %+v\n%s", c.msgs, info.String())
	}
	if c.interrupt() {
		t.Error("interrupt with no answer running reported one")
	}
	step("/exit", false)
}

// TestChatInputLines: piped input is read line by line, then io.EOF; Ctrl-C typed at the
// terminal becomes Ctrl-U (clear the line).
func TestChatInputLines(t *testing.T) {
	l := scannerLines{bufio.NewScanner(strings.NewReader("a\n/clear\n"))}
	for _, want := range []string{"a", "/clear"} {
		if got, err := l.ReadLine(); got != want || err != nil {
			t.Fatalf("%q %v, want %q", got, err, want)
		}
	}
	if _, err := l.ReadLine(); err != io.EOF {
		t.Fatalf("after the last line: %v", err)
	}
	b := make([]byte, 8)
	n, _ := ctrlCClears{strings.NewReader("ab\x03c")}.Read(b)
	if string(b[:n]) != "ab\x15c" {
		t.Errorf("%q", b[:n])
	}
}
