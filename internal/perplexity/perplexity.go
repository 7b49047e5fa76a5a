// Package perplexity measures how well a language model predicts a text, the way
// llama.cpp's llama-perplexity does: the text's tokens are cut into windows of Ctx tokens,
// each window starts with BOS, and only the second half of each window is scored, so that
// every scored token sees at least Ctx/2 tokens of context. With a Stride, windows start
// Stride tokens apart and the last Stride tokens of each are scored (llama.cpp's
// --ppl-stride); as there, such a window is Ctx + Stride/2 tokens long, and it is run on
// the text's own tokens, without BOS (llama.cpp's strided path puts BOS in only after
// evaluating the window).
//
// Against a reference model's logits on the same windows it also measures the KL
// divergence of the model's next-token distribution from the reference's and how often
// both rank the same token first: the figures llama.cpp's quantization tables report.
package perplexity

import (
	"fmt"
	"math"
)

// Scorer runs a model on one window of tokens from an empty context and returns the
// logits following each token: len(tokens) rows of Vocab() values.
type Scorer interface {
	Score(tokens []int32) ([]float32, error)
	Vocab() int
}

// Options controls Evaluate.
type Options struct {
	Ctx    int   // window length in tokens (>= 4); strided windows are Ctx + Stride/2
	Stride int   // 0: non-overlapping windows scoring their second half; else windows Stride apart scoring their last Stride tokens
	BOS    int32 // token each non-overlapping window starts with; -1 leaves the text's own first token
	// MaxWindows, when > 0, stops after that many windows (llama-perplexity's --chunks).
	MaxWindows int
	// Progress, if set, is told after each window the running perplexity.
	Progress func(window, windows int, ppl float64)
}

// Result is the outcome of Evaluate.
type Result struct {
	Perplexity float64 // exp of the mean negative log-likelihood
	StdErr     float64 // llama.cpp's uncertainty of Perplexity (its "+/-")
	Tokens     int     // tokens scored
	Windows    int     // windows run
	Ctx        int     // the window length used
	// With a reference model only:
	KLDivergence  float64 // mean KL(reference || model) per scored token, in nats
	Top1Agreement float64 // fraction of scored tokens where both models' most likely token agree
}

// WindowLen returns the length of the windows opt asks for.
func WindowLen(opt Options) int {
	if opt.Stride > 0 {
		return opt.Ctx + opt.Stride/2
	}
	return opt.Ctx
}

// plan returns the windows' starts and the range of positions [from, to) within a window
// whose logits are scored (position j predicts the window's token j+1).
func plan(n int, opt Options) (starts []int, from, to int, err error) {
	ctx := WindowLen(opt)
	if ctx < 4 {
		return nil, 0, 0, fmt.Errorf("perplexity: context of %d tokens: want at least 4", ctx)
	}
	if opt.Stride < 0 || opt.Stride >= opt.Ctx {
		return nil, 0, 0, fmt.Errorf("perplexity: stride %d: want 0 or 1..%d", opt.Stride, opt.Ctx-1)
	}
	if opt.Stride == 0 {
		if n < 2*ctx {
			return nil, 0, 0, fmt.Errorf("perplexity: the text has %d tokens: need at least %d (2 x ctx) for a reliable estimate", n, 2*ctx)
		}
		for i := 0; i+ctx <= n; i += ctx {
			starts = append(starts, i)
		}
		return starts, ctx / 2, ctx - 1, nil
	}
	if n < 2*ctx {
		return nil, 0, 0, fmt.Errorf("perplexity: the text has %d tokens: need at least %d (2 x ctx)", n, 2*ctx)
	}
	windows := (n - ctx + opt.Stride - 1) / opt.Stride
	for i := range windows {
		starts = append(starts, i*opt.Stride)
	}
	return starts, ctx - opt.Stride - 1, ctx - 1, nil
}

// Evaluate runs m (and base, when not nil) over the windows of tokens that opt describes.
func Evaluate(m, base Scorer, tokens []int32, opt Options) (Result, error) {
	starts, from, to, err := plan(len(tokens), opt)
	if err != nil {
		return Result{}, err
	}
	if opt.MaxWindows > 0 && len(starts) > opt.MaxWindows {
		starts = starts[:opt.MaxWindows]
	}
	vocab := m.Vocab()
	if base != nil && base.Vocab() != vocab {
		return Result{}, fmt.Errorf("perplexity: the model's vocabulary has %d tokens, the reference's %d", vocab, base.Vocab())
	}
	res := Result{Ctx: WindowLen(opt), Windows: len(starts)}
	var nll, nll2, kl float64
	agree := 0
	window := make([]int32, res.Ctx)
	logp := make([]float64, vocab)
	baseLogp := make([]float64, vocab)
	for w, start := range starts {
		copy(window, tokens[start:start+res.Ctx])
		if opt.BOS >= 0 && opt.Stride == 0 {
			window[0] = opt.BOS
		}
		logits, err := m.Score(window)
		if err != nil {
			return Result{}, fmt.Errorf("perplexity: window %d: %w", w+1, err)
		}
		var baseLogits []float32
		if base != nil {
			if baseLogits, err = base.Score(window); err != nil {
				return Result{}, fmt.Errorf("perplexity: reference, window %d: %w", w+1, err)
			}
		}
		for j := from; j < to; j++ {
			next := tokens[start+j+1]
			top := LogSoftmax(logits[j*vocab:(j+1)*vocab], logp)
			l := -logp[next]
			nll += l
			nll2 += l * l
			res.Tokens++
			if base != nil {
				baseTop := LogSoftmax(baseLogits[j*vocab:(j+1)*vocab], baseLogp)
				kl += KL(baseLogp, logp)
				if top == baseTop {
					agree++
				}
			}
		}
		if opt.Progress != nil {
			opt.Progress(w+1, len(starts), math.Exp(nll/float64(res.Tokens)))
		}
	}
	n := float64(res.Tokens)
	mean := nll / n
	res.Perplexity = math.Exp(mean)
	if v := nll2/n - mean*mean; v > 0 && res.Tokens > 1 {
		res.StdErr = math.Sqrt(v/(n-1)) * res.Perplexity
	}
	if base != nil {
		res.KLDivergence = kl / n
		res.Top1Agreement = float64(agree) / n
	}
	return res, nil
}

// LogSoftmax writes the log-probabilities of logits into dst (computed in float64 with
// the maximum subtracted) and returns the index of the largest logit.
func LogSoftmax(logits []float32, dst []float64) (argmax int) {
	hi := math.Inf(-1)
	for i, v := range logits {
		if float64(v) > hi {
			hi, argmax = float64(v), i
		}
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - hi)
	}
	lse := hi + math.Log(sum)
	for i, v := range logits {
		dst[i] = float64(v) - lse
	}
	return argmax
}

// KL returns the Kullback-Leibler divergence sum p (log p - log q) of two distributions
// given as log-probabilities.
func KL(logP, logQ []float64) float64 {
	var s float64
	for i, lp := range logP {
		if p := math.Exp(lp); p > 0 {
			s += p * (lp - logQ[i])
		}
	}
	return s
}
