package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "run", summary: "generate text from a prompt", run: runRun})
}

func runRun(args []string) error {
	fs := newFlags("run", "MODEL | -m MODEL [-p PROMPT] [-n N] [flags]")
	prompt := fs.String("p", "", "prompt (empty: start from BOS)")
	n := fs.Int("n", 256, "tokens to generate at most")
	useChat := fs.Bool("chat", false, "wrap the prompt in the model's chat template as a user turn")
	seed := fs.Int64("seed", -1, "random seed (-1: from the clock)")
	ef := addEngineFlags(fs, allEngineFlags)
	sf := addSamplingFlags(fs)
	if err := ef.parse(fs, args, "seed"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (the prompt goes after -p)", fs.Arg(0))
	}
	if *n <= 0 {
		return fmt.Errorf("-n %d: need a positive number of tokens", *n)
	}
	e, err := openGenerator(ef, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	tok := e.Loaded().Tokenizer()

	var ids []int32
	switch {
	case *useChat:
		t, closeTemplate, err := chatTemplate(e)
		if err != nil {
			return err
		}
		defer closeTemplate()
		if ids, err = e.RenderChat(t, chat.Input{Messages: []chat.Message{{Role: "user", Content: *prompt}}, AddGenerationPrompt: true}, false); err != nil {
			return err
		}
	case *prompt == "":
		bos := tok.Vocab().BOS
		if bos < 0 {
			return errors.New("the vocabulary has no BOS token to start from; give a prompt with -p")
		}
		ids = []int32{int32(bos)}
	default:
		if ids, err = e.Tokenize(*prompt, true); err != nil {
			return err
		}
		if len(ids) == 0 {
			return errors.New("the prompt encodes to no tokens")
		}
	}
	maxTokens := *n
	if limit := e.MaxModelLen(); len(ids)+maxTokens > limit {
		maxTokens = limit - len(ids)
		fmt.Fprintf(os.Stderr, "warning: %d prompt + %d new tokens exceed the %d-token context: generating %d at most\n", len(ids), *n, limit, max(maxTokens, 0))
		if maxTokens <= 0 {
			return fmt.Errorf("the prompt (%d tokens) fills the %d-token context", len(ids), limit)
		}
	}
	params := sf.params(e.SamplingDefaults())
	params.MaxTokens = maxTokens
	s := clockSeed(*seed)
	params.Seed = &s

	detok := tokenizer.NewDetokenizer(tok, true)
	if !*useChat {
		// Echo the prompt, as llama2.c does, through the same detokenizer so that the text
		// joins up exactly.
		for _, id := range ids {
			if _, err := io.WriteString(os.Stdout, detok.Add(int(id))); err != nil {
				return err
			}
		}
	}
	r, err := generate(context.Background(), e, ids, params, detok, os.Stdout)
	fmt.Println()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "prompt: %d tokens in %v (%.1f tokens/s); generated: %d tokens in %v (%.1f tokens/s); seed %d\n",
		len(ids), r.prefill.Round(time.Millisecond), perSecond(len(ids), r.prefill),
		len(r.ids), r.decode.Round(time.Millisecond), perSecond(len(r.ids), r.decode), s)
	return nil
}

// chatTemplate loads the model's chat template into a sandbox of one worker, under the
// default limits; close stops the worker.
func chatTemplate(e *kvasir.Engine) (t *chat.Template, close func() error, err error) {
	src := e.ChatTemplate()
	if src == "" {
		return nil, nil, fmt.Errorf("%s has no chat template", e.ModelName())
	}
	sb, err := chat.NewSandbox(chat.SandboxConfig{Workers: 1})
	if err != nil {
		return nil, nil, err
	}
	if t, err = sb.Load(context.Background(), src); err != nil {
		sb.Close()
		return nil, nil, err
	}
	return t, sb.Close, nil
}
