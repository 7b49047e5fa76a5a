package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "run", summary: "generate text from a prompt on the CPU", run: runRun})
}

// loaded is a model ready to generate: its files, tokenizer and fast path.
type loaded struct {
	l    *kvasir.Loaded
	file *format.Model
	tok  *tokenizer.Tokenizer
	m    *model.Model
}

// loadModel opens the model the flags name and binds its weights on the device they name,
// logging the load time to standard error.
func loadModel(f *engineFlags) (*loaded, error) {
	start := time.Now()
	l, err := f.load()
	if err != nil {
		return nil, err
	}
	fm := l.File()
	if l.Tokenizer() == nil {
		l.Close()
		return nil, fmt.Errorf("%s has no tokenizer; name one with -z", fm.Name())
	}
	c := fm.Config
	fmt.Fprintf(os.Stderr, "loaded %s (%s, %d layers, dim %d, %.1f MB of weights) in %v on %s\n",
		fm.Name(), c.Arch, c.Layers, c.Dim, float64(fm.Bytes())/1e6, time.Since(start).Round(time.Millisecond), describe(l))
	return &loaded{l: l, file: fm, tok: l.Tokenizer(), m: l.Model()}, nil
}

// Close releases the model.
func (l *loaded) Close() { l.l.Close() }

// chatTemplate compiles the model's chat template.
func (l *loaded) chatTemplate() (*chat.Template, error) {
	if l.file.ChatTemplate == "" {
		return nil, fmt.Errorf("%s has no chat template", l.file.Name())
	}
	return chat.New(l.file.ChatTemplate)
}

// renderChat renders messages with the template (with the assistant's generation prompt)
// and tokenizes the result, special tokens included. A BOS the template wrote itself is not
// doubled.
func (l *loaded) renderChat(t *chat.Template, msgs []chat.Message) ([]int32, error) {
	v := l.file.Vocab
	tokenText := func(id int) string {
		if id >= 0 && id < len(v.Tokens) {
			return v.Tokens[id]
		}
		return ""
	}
	text, err := t.Render(chat.Input{Messages: msgs, AddGenerationPrompt: true,
		BOSToken: tokenText(v.BOS), EOSToken: tokenText(v.EOS)})
	if err != nil {
		return nil, err
	}
	ids := l.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
	if len(ids) >= 2 && ids[0] == v.BOS && ids[1] == v.BOS {
		ids = ids[1:]
	}
	return toInt32(ids), nil
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// samplingFlags adds the sampling flags to fs and returns a function giving their values.
func samplingFlags(fs *flag.FlagSet) func() sample.Params {
	temp := fs.Float64("temperature", 0.8, "sampling temperature; 0 is greedy")
	topP := fs.Float64("top-p", 0.9, "nucleus sampling: keep the most likely tokens up to this probability (1: off)")
	topK := fs.Int("top-k", 40, "keep the K most likely tokens (0: off)")
	minP := fs.Float64("min-p", 0, "drop tokens less likely than this fraction of the most likely (0: off)")
	seed := fs.Int64("seed", -1, "random seed (-1: from the clock)")
	return func() sample.Params {
		s := uint64(*seed)
		if *seed < 0 {
			s = uint64(time.Now().UnixNano())
		}
		return sample.Params{Temperature: float32(*temp), TopP: float32(*topP), TopK: *topK, MinP: float32(*minP), Seed: s}
	}
}

// generate samples up to n tokens after logits, streaming their text through detok to w,
// and stops early at an end-of-generation token or when the session is full. It returns
// the generated ids (the stopping token excluded) and the decode time.
func (l *loaded) generate(s *model.Session, logits []float32, n int, smp *sample.Sampler, detok *tokenizer.Detokenizer, w io.Writer) ([]int32, time.Duration, error) {
	var out []int32
	start := time.Now()
	// A plain greedy sampler lets the session pick the next token itself (on the device
	// where the backend can), so that the logits need not be copied back.
	greedy := smp.Greedy()
	next := smp.Sample(logits)
	for len(out) < n {
		if l.tok.IsEOG(next) {
			break
		}
		out = append(out, int32(next))
		if _, err := io.WriteString(w, detok.Add(next)); err != nil {
			return out, time.Since(start), err
		}
		if len(out) == n || s.Len() >= s.Cap() {
			break
		}
		if greedy {
			id, err := s.StepGreedy(int32(next))
			if err != nil {
				return out, time.Since(start), err
			}
			next = int(id)
			continue
		}
		var err error
		if logits, err = s.Step(int32(next)); err != nil {
			return out, time.Since(start), err
		}
		next = smp.Sample(logits)
	}
	_, err := io.WriteString(w, detok.Flush())
	return out, time.Since(start), err
}

func runRun(args []string) error {
	fs := newFlags("run", "-m MODEL [-p PROMPT] [-n N] [flags]")
	prompt := fs.String("p", "", "prompt (empty: start from BOS)")
	n := fs.Int("n", 256, "tokens to generate at most")
	useChat := fs.Bool("chat", false, "wrap the prompt in the model's chat template as a user turn")
	ef := addEngineFlags(fs, loadFlags)
	params := samplingFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (the prompt goes after -p)", fs.Arg(0))
	}
	if *n <= 0 {
		return fmt.Errorf("-n %d: need a positive number of tokens", *n)
	}
	l, err := loadModel(ef)
	if err != nil {
		return err
	}
	defer l.Close()

	var ids []int32
	switch {
	case *useChat:
		t, err := l.chatTemplate()
		if err != nil {
			return err
		}
		if ids, err = l.renderChat(t, []chat.Message{{Role: "user", Content: *prompt}}); err != nil {
			return err
		}
	case *prompt == "":
		if l.file.Vocab.BOS < 0 {
			return errors.New("the vocabulary has no BOS token to start from; give a prompt with -p")
		}
		ids = []int32{int32(l.file.Vocab.BOS)}
	default:
		ids = toInt32(l.tok.Encode(*prompt, tokenizer.EncodeOptions{AddSpecial: true}))
		if len(ids) == 0 {
			return errors.New("the prompt encodes to no tokens")
		}
	}
	if ctx := l.file.Config.ContextLen; ctx > 0 && len(ids)+*n > ctx {
		fmt.Fprintf(os.Stderr, "warning: %d prompt + %d new tokens exceed the model's context length %d\n", len(ids), *n, ctx)
	}
	s, err := l.m.NewSession(len(ids) + *n)
	if err != nil {
		return err
	}
	p := params()
	smp := sample.New(p)

	start := time.Now()
	logits, err := s.Prefill(ids)
	if err != nil {
		return err
	}
	prefill := time.Since(start)
	detok := tokenizer.NewDetokenizer(l.tok, true)
	if !*useChat {
		// Echo the prompt, as llama2.c does, through the same detokenizer so that the text
		// joins up exactly.
		for _, id := range ids {
			if _, err := io.WriteString(os.Stdout, detok.Add(int(id))); err != nil {
				return err
			}
		}
	}
	out, decode, err := l.generate(s, logits, *n, smp, detok, os.Stdout)
	fmt.Println()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "prompt: %d tokens in %v (%.1f tokens/s); generated: %d tokens in %v (%.1f tokens/s); seed %d\n",
		len(ids), prefill.Round(time.Millisecond), perSecond(len(ids), prefill),
		len(out), decode.Round(time.Millisecond), perSecond(len(out), decode), p.Seed)
	return nil
}

// perSecond returns n per d, 0 for no time.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
