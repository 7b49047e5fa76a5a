package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/perplexity"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "perplexity", summary: "measure a model's perplexity on a text, as llama-perplexity does (and KL divergence from a reference model)", run: runPerplexity})
}

// perplexityJSON is the --json output.
type perplexityJSON struct {
	Perplexity    float64  `json:"perplexity"`
	StdErr        float64  `json:"perplexity_stderr"`
	Tokens        int      `json:"tokens"`
	Windows       int      `json:"windows"`
	Ctx           int      `json:"ctx"`
	Stride        int      `json:"stride,omitempty"`
	KLDivergence  *float64 `json:"kl_divergence,omitempty"`
	Top1Agreement *float64 `json:"top1_agreement,omitempty"`
	Seconds       float64  `json:"seconds"`
}

func runPerplexity(args []string) error {
	fs := newFlags("perplexity", "-m MODEL -f TEXT [--ctx N] [--stride S] [--chunks N] [--batch N] [--json] [--kl-base MODEL]")
	ef := addEngineFlags(fs, loadFlags)
	file := fs.String("f", "", "text file to measure on (required)")
	ctx := fs.Int("ctx", 512, "window length in tokens; the second half of each window is scored")
	stride := fs.Int("stride", 0, "start windows this many tokens apart and score their last S tokens; the windows are then ctx + S/2 tokens, without BOS, as llama-perplexity's --ppl-stride makes them (0: non-overlapping windows)")
	chunks := fs.Int("chunks", 0, "most windows to score (0: all), as llama-perplexity's --chunks")
	batch := fs.Int("batch", 0, "tokens per forward step (0: 512)")
	asJSON := fs.Bool("json", false, "print one JSON object (progress goes to standard error)")
	klBase := fs.String("kl-base", "", "reference model: also report the KL divergence from its next-token distributions and top-1 agreement")
	klBaseKV := fs.String("kl-base-kv-cache-dtype", "", "the reference model's --kv-cache-dtype (default: the measured model's); with --kl-base naming the same model, measures what a quantized KV cache costs, e.g. --kv-cache-dtype int8 --kl-base-kv-cache-dtype f32")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" || ef.model == "" {
		fs.Usage()
		return fmt.Errorf("-m and -f are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	text, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	l, err := ef.load()
	if err != nil {
		return err
	}
	defer l.Close()
	tok := l.Tokenizer()
	if tok == nil {
		return fmt.Errorf("%s has no vocabulary to tokenize the text with", ef.model)
	}
	window := perplexity.WindowLen(perplexity.Options{Ctx: *ctx, Stride: max(*stride, 0)})
	m, err := newSessionScorer(l, window, *batch)
	if err != nil {
		return err
	}
	var base perplexity.Scorer
	if *klBase != "" {
		bf := *ef
		bf.model = *klBase
		if *klBaseKV != "" {
			bf.kvDType = *klBaseKV
		}
		bl, err := bf.load()
		if err != nil {
			return fmt.Errorf("--kl-base: %w", err)
		}
		defer bl.Close()
		if base, err = newSessionScorer(bl, window, *batch); err != nil {
			return err
		}
	}
	out := io.Writer(os.Stdout)
	if *asJSON {
		out = os.Stderr
	}
	fmt.Fprintf(out, "perplexity: tokenizing the input ..\n")
	t0 := time.Now()
	v := tok.Vocab()
	ids := tok.Encode(string(text), tokenizer.EncodeOptions{AddSpecial: true})
	tokens := make([]int32, len(ids))
	for i, id := range ids {
		tokens[i] = int32(id)
	}
	fmt.Fprintf(out, "perplexity: tokenization took %.2f ms, %d tokens\n", float64(time.Since(t0).Microseconds())/1000, len(tokens))
	opt := perplexity.Options{Ctx: *ctx, Stride: *stride, BOS: -1, MaxWindows: *chunks}
	if v.AddBOS && v.BOS >= 0 {
		opt.BOS = int32(v.BOS)
	}
	opt.Progress = func(w, n int, ppl float64) {
		fmt.Fprintf(out, "[%d]%.4f,", w, ppl)
		if w == n {
			fmt.Fprintln(out)
		}
	}
	windows := 0
	if *stride == 0 && *ctx > 0 {
		windows = len(tokens) / *ctx
	}
	if *chunks > 0 {
		windows = min(windows, *chunks)
	}
	if *stride > 0 {
		windows = (len(tokens) - window + *stride - 1) / *stride
		if *chunks > 0 {
			windows = min(windows, *chunks)
		}
	}
	fmt.Fprintf(out, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, stride=%d\n", max(windows, 0), window, *stride)
	t1 := time.Now()
	res, err := perplexity.Evaluate(m, base, tokens, opt)
	if err != nil {
		return err
	}
	secs := time.Since(t1).Seconds()
	fmt.Fprintf(out, "Final estimate: PPL = %.4f +/- %.5f\n", res.Perplexity, res.StdErr)
	if base != nil {
		fmt.Fprintf(out, "Mean KLD: %.6f\nSame top p: %.3f %%\n", res.KLDivergence, 100*res.Top1Agreement)
	}
	fmt.Fprintf(out, "perplexity: %d tokens scored in %d windows, %.2f s\n", res.Tokens, res.Windows, secs)
	if !*asJSON {
		return nil
	}
	j := perplexityJSON{Perplexity: res.Perplexity, StdErr: res.StdErr, Tokens: res.Tokens, Windows: res.Windows,
		Ctx: res.Ctx, Stride: *stride, Seconds: secs}
	if base != nil {
		j.KLDivergence, j.Top1Agreement = &res.KLDivergence, &res.Top1Agreement
	}
	return printJSON(j)
}

// sessionScorer scores windows on a loaded model through one reused session.
type sessionScorer struct {
	s     *model.Session
	vocab int
}

func newSessionScorer(l *kvasir.Loaded, ctx, batch int) (*sessionScorer, error) {
	if ctx < 1 {
		return nil, fmt.Errorf("--ctx %d: want a positive window length", ctx)
	}
	if batch < 0 {
		return nil, fmt.Errorf("--batch %d: want a positive number of tokens (0: 512)", batch)
	}
	s, err := l.Model().NewSession(ctx)
	if err != nil {
		return nil, err
	}
	s.Chunk = batch
	return &sessionScorer{s: s, vocab: l.Model().Config().VocabSize}, nil
}

func (p *sessionScorer) Vocab() int { return p.vocab }

func (p *sessionScorer) Score(tokens []int32) ([]float32, error) {
	p.s.Reset()
	return p.s.Score(tokens)
}
