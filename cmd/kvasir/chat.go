package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "chat", summary: "chat with a model in the terminal", run: runChat})
}

// runChat keeps one engine for the conversation and submits one request per turn: the
// whole conversation rendered again with the chat template. The prefix cache holds the
// earlier turns' keys and values, so a turn prefills little more than its new message.
func runChat(args []string) error {
	fs := newFlags("chat", "MODEL | -m MODEL [flags]")
	system := fs.String("system", "", "system prompt")
	n := fs.Int("n", 1024, "tokens to generate at most per reply")
	ctxLen := fs.Int("ctx", 4096, "conversation length in tokens (capped at the model's context length; --max-model-len overrides it)")
	seed := fs.Int64("seed", -1, "random seed (-1: from the clock)")
	ef := addEngineFlags(fs, allEngineFlags)
	sf := addSamplingFlags(fs)
	if err := ef.parse(fs, args, "seed"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	e, err := openGenerator(ef, func(opt *kvasir.Options, fm *format.Model) {
		if opt.MaxModelLen == 0 {
			opt.MaxModelLen = *ctxLen
			if c := fm.Config.ContextLen; c > 0 && (opt.MaxModelLen <= 0 || opt.MaxModelLen > c) {
				opt.MaxModelLen = c
			}
		}
	})
	if err != nil {
		return err
	}
	defer e.Close()
	tmpl, closeTemplate, err := chatTemplate(e)
	if err != nil {
		return err
	}
	defer closeTemplate()
	tok := e.Loaded().Tokenizer()
	params := sf.params(e.SamplingDefaults())
	seed0 := clockSeed(*seed)

	var msgs []chat.Message
	if *system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: *system})
	}
	st, _ := os.Stdin.Stat()
	interactive := st != nil && st.Mode()&os.ModeCharDevice != 0
	if interactive {
		fmt.Fprintln(os.Stderr, "Type a message and press Enter; an empty line or Ctrl-D ends the chat.")
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for turn := uint64(0); ; turn++ {
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
		ids, err := e.RenderChat(tmpl, chat.Input{Messages: msgs, AddGenerationPrompt: true}, false)
		if err != nil {
			return err
		}
		if len(ids) >= e.MaxModelLen() {
			return fmt.Errorf("the conversation (%d tokens) no longer fits the %d-token context", len(ids), e.MaxModelLen())
		}
		params.MaxTokens = min(*n, e.MaxModelLen()-len(ids))
		s := seed0 + turn // each turn draws afresh
		params.Seed = &s
		r, err := generate(e, ids, params, tokenizer.NewDetokenizer(tok, true), os.Stdout)
		fmt.Println()
		if err != nil {
			return err
		}
		reply, _ := e.Detokenize(r.ids, true)
		msgs = append(msgs, chat.Message{Role: "assistant", Content: reply})
		fresh := len(ids) - r.cached
		fmt.Fprintf(os.Stderr, "[%d new prompt tokens at %.0f tokens/s, %d reply tokens at %.1f tokens/s]\n",
			fresh, perSecond(fresh, r.prefill), len(r.ids), perSecond(len(r.ids), r.decode))
	}
	return in.Err()
}
