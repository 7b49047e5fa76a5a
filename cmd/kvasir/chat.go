package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"golang.org/x/term"

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
	c := &chatSession{e: e, tmpl: tmpl, system: *system, params: sf.params(e.SamplingDefaults()), maxReply: *n,
		seed: clockSeed(*seed), tok: e.Loaded().Tokenizer(), out: os.Stdout, info: os.Stderr}
	c.clear()
	lines, closeLines, err := chatInput()
	if err != nil {
		return err
	}
	defer closeLines()
	// Ctrl-C stops the answer being written, not the chat; with no answer running it
	// ends the program as usual (at the terminal's prompt it only clears the line).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	go func() {
		for range sigs {
			if !c.interrupt() {
				closeLines()
				os.Exit(130)
			}
		}
	}()
	for {
		line, err := lines.ReadLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if more, err := c.handle(line); err != nil || !more {
			return err
		}
	}
}

// chatHelp is what /help prints.
const chatHelp = `Type a message and press Enter. Commands:
  /clear  forget the conversation (the system prompt stays)
  /exit   end the chat (also /bye, or Ctrl-D)
  /help   this list
Ctrl-C stops the answer being written; at the prompt it clears the line. Up and down
arrows recall earlier lines.`

// chatSession is a conversation in the terminal: its messages, rendered again with the chat
// template for every turn (the prefix cache keeps the earlier turns' keys and values), and
// how replies are sampled.
type chatSession struct {
	e        *kvasir.Engine
	tmpl     *chat.Template
	system   string
	msgs     []chat.Message
	params   kvasir.SamplingParams
	maxReply int
	seed     uint64 // the seed of the next turn (each turn draws afresh)
	tok      *tokenizer.Tokenizer
	// out receives the replies, info the notes (figures, commands' answers).
	out, info io.Writer
	// stop cancels the reply being generated (nil between replies).
	mu   sync.Mutex
	stop context.CancelFunc
}

// clear forgets the conversation but the system prompt.
func (c *chatSession) clear() {
	c.msgs = c.msgs[:0]
	if c.system != "" {
		c.msgs = append(c.msgs, chat.Message{Role: "system", Content: c.system})
	}
}

// interrupt stops the reply being generated, reporting whether there was one.
func (c *chatSession) interrupt() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return false
	}
	c.stop()
	return true
}

// handle answers one line: a command, or a message to reply to. It reports whether the chat
// goes on.
func (c *chatSession) handle(line string) (bool, error) {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return true, nil
	case line == "/exit" || line == "/bye" || line == "/quit":
		return false, nil
	case line == "/clear":
		c.clear()
		fmt.Fprintln(c.info, "[conversation cleared]")
		return true, nil
	case line == "/help" || line == "/?":
		fmt.Fprintln(c.info, chatHelp)
		return true, nil
	case strings.HasPrefix(line, "/") && !strings.Contains(line, " ") && len(line) > 1:
		fmt.Fprintf(c.info, "[unknown command %s: /help lists them; start a message with a space to send it as is]\n", line)
		return true, nil
	}
	c.msgs = append(c.msgs, chat.Message{Role: "user", Content: line})
	ids, err := c.e.RenderChat(c.tmpl, chat.Input{Messages: c.msgs, AddGenerationPrompt: true}, false)
	if err != nil {
		return false, err
	}
	if len(ids) >= c.e.MaxModelLen() {
		c.msgs = c.msgs[:len(c.msgs)-1]
		fmt.Fprintf(c.info, "[the conversation (%d tokens) no longer fits the %d-token context: /clear starts afresh]\n", len(ids), c.e.MaxModelLen())
		return true, nil
	}
	params := c.params
	params.MaxTokens = min(c.maxReply, c.e.MaxModelLen()-len(ids))
	seed := c.seed
	c.seed++
	params.Seed = &seed
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.stop = cancel
	c.mu.Unlock()
	r, err := generate(ctx, c.e, ids, params, tokenizer.NewDetokenizer(c.tok, true), c.out)
	c.mu.Lock()
	c.stop = nil
	c.mu.Unlock()
	stopped := ctx.Err() != nil
	cancel()
	fmt.Fprintln(c.out)
	if err != nil && !stopped {
		return false, err
	}
	// A stopped answer stays in the conversation as far as it went.
	reply, _ := c.e.Detokenize(r.ids, true)
	c.msgs = append(c.msgs, chat.Message{Role: "assistant", Content: reply})
	fresh := len(ids) - r.cached
	note := ""
	if stopped {
		note = "stopped; "
	}
	fmt.Fprintf(c.info, "[%s%d new prompt tokens at %.0f tokens/s, %d reply tokens at %.1f tokens/s]\n",
		note, fresh, perSecond(fresh, r.prefill), len(r.ids), perSecond(len(r.ids), r.decode))
	return true, nil
}

// lineReader reads the chat's input lines; io.EOF ends the chat.
type lineReader interface {
	ReadLine() (string, error)
}

// chatInput returns the chat's line reader: at a terminal, one with line editing and
// history (golang.org/x/term, the terminal raw only while a line is typed); otherwise
// standard input's lines. close restores the terminal.
func chatInput() (lineReader, func(), error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) || !term.IsTerminal(int(os.Stdout.Fd())) {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(nil, 1<<20)
		return scannerLines{sc}, func() {}, nil
	}
	fmt.Fprintln(os.Stderr, "Type a message and press Enter; /help lists the commands, /exit or Ctrl-D ends the chat.")
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{ctrlCClears{os.Stdin}, os.Stdout}, "> ")
	tl := &termLines{t: t, fd: fd}
	return tl, tl.restore, nil
}

// scannerLines reads lines from a scanner.
type scannerLines struct{ sc *bufio.Scanner }

func (s scannerLines) ReadLine() (string, error) {
	if s.sc.Scan() {
		return s.sc.Text(), nil
	}
	if err := s.sc.Err(); err != nil {
		return "", err
	}
	return "", io.EOF
}

// termLines reads lines at a terminal, raw only while a line is being typed, so that
// replies print and Ctrl-C signals as usual in between.
type termLines struct {
	t     *term.Terminal
	fd    int
	mu    sync.Mutex
	state *term.State // the cooked state to restore while a line is typed (nil otherwise)
}

func (l *termLines) ReadLine() (string, error) {
	st, err := term.MakeRaw(l.fd)
	if err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	l.mu.Lock()
	l.state = st
	l.mu.Unlock()
	defer l.restore()
	return l.t.ReadLine()
}

// restore puts the terminal back in its cooked state, when raw.
func (l *termLines) restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != nil {
		term.Restore(l.fd, l.state)
		l.state = nil
	}
}

// ctrlCClears turns Ctrl-C typed at the prompt into Ctrl-U, which clears the line, so that
// it does not end the chat (x/term reads Ctrl-C as the end of input).
type ctrlCClears struct{ r io.Reader }

func (c ctrlCClears) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for i := range p[:n] {
		if p[i] == 3 {
			p[i] = 21
		}
	}
	return n, err
}
