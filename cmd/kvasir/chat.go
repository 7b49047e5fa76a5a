package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "chat", summary: "chat with a model in the terminal", run: runChat})
}

func runChat(args []string) error {
	fs := newFlags("chat", "-m MODEL [flags]")
	system := fs.String("system", "", "system prompt")
	n := fs.Int("n", 1024, "tokens to generate at most per reply")
	ctxLen := fs.Int("ctx", 4096, "conversation length in tokens (capped at the model's context length)")
	ef := addEngineFlags(fs, loadFlags)
	params := samplingFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	l, err := loadModel(ef)
	if err != nil {
		return err
	}
	defer l.Close()
	tmpl, err := l.chatTemplate()
	if err != nil {
		return err
	}
	limit := *ctxLen
	if c := l.file.Config.ContextLen; c > 0 && (limit <= 0 || limit > c) {
		limit = c
	}
	s, err := l.m.NewSession(limit)
	if err != nil {
		return err
	}
	smp := sample.New(params())

	var msgs []chat.Message
	if *system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: *system})
	}
	var cached []int32 // the tokens whose keys and values the session holds
	st, _ := os.Stdin.Stat()
	interactive := st != nil && st.Mode()&os.ModeCharDevice != 0
	if interactive {
		fmt.Fprintln(os.Stderr, "Type a message and press Enter; an empty line or Ctrl-D ends the chat.")
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for {
		if interactive {
			fmt.Fprint(os.Stderr, "> ")
		}
		if !in.Scan() {
			break
		}
		line := strings.TrimSpace(in.Text())
		if line == "" {
			if interactive {
				break
			}
			continue
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: line})
		ids, err := l.renderChat(tmpl, msgs)
		if err != nil {
			return err
		}
		if len(ids) >= s.Cap() {
			return fmt.Errorf("the conversation (%d tokens) no longer fits the %d-token context", len(ids), s.Cap())
		}
		// Reuse the cached prefix the new rendering shares with the old one.
		keep := 0
		for keep < len(cached) && keep < len(ids)-1 && cached[keep] == ids[keep] {
			keep++
		}
		s.Truncate(keep)
		start := time.Now()
		logits, err := s.Prefill(ids[keep:])
		if err != nil {
			return err
		}
		prefill := time.Since(start)
		detok := tokenizer.NewDetokenizer(l.tok, true)
		reply, decode, err := l.generate(s, logits, min(*n, s.Cap()-s.Len()), smp, detok, os.Stdout)
		fmt.Println()
		if err != nil {
			return err
		}
		cached = append(ids, reply...)
		if len(cached) > s.Len() {
			cached = cached[:s.Len()] // the last sampled token was never run
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: l.tok.Decode(toInts(reply), true)})
		fmt.Fprintf(os.Stderr, "[%d new prompt tokens at %.0f tokens/s, %d reply tokens at %.1f tokens/s]\n",
			len(ids)-keep, perSecond(len(ids)-keep, prefill), len(reply), perSecond(len(reply), decode))
	}
	return in.Err()
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
