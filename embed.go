package kvasir

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/encoder"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// EmbedderOptions configures OpenEmbedder.
type EmbedderOptions struct {
	// Pooling overrides the model's pooling: "mean", "cls" or "last" ("": the model's,
	// from GGUF's {arch}.pooling_type or sentence-transformers' 1_Pooling/config.json).
	Pooling string
	// Device is where the encoder runs: the CPU (the zero value) or a CUDA GPU.
	Device Device
	// Threads is the number of CPU worker threads (0: all cores).
	Threads int
	// CPUKernels names the CPU kernel set ("": the fastest the CPU has).
	CPUKernels string
	// MaxBatchTokens bounds the tokens of one forward, and so the activations' memory:
	// calls waiting together are batched up to it, and a call with more tokens runs in
	// several forwards (0: DefaultEmbedBatchTokens). An input longer than it runs alone
	// on an encoder; a decoder's is its engine's token budget (chunked prefill).
	MaxBatchTokens int
	// A decoder runs on a pooling engine: MaxNumSeqs caps its inputs in flight (0: the
	// engine's default), KVCacheMemory is its KV cache budget (0: as Options', on a GPU
	// from GPUMemoryUtilization), and DisablePrefixCaching turns its prefix cache off.
	// Encoders have no KV cache.
	MaxNumSeqs           int
	KVCacheMemory        int64
	GPUMemoryUtilization float64
	DisablePrefixCaching bool
}

// DefaultEmbedBatchTokens is the default EmbedderOptions.MaxBatchTokens.
const DefaultEmbedBatchTokens = 8192

// EmbedInput is one sequence to embed or score: token ids (with the model's [CLS] and
// [SEP] when they came from Tokenize or TokenizePair) and, for a pair, each token's
// segment (nil: segment 0 throughout).
type EmbedInput struct {
	Tokens []int32
	Types  []int32
}

// Embedder serves an embedding model: an encoder (BERT family) with its embeddings and,
// with a classifier head (a cross-encoder), relevance scores, requests arriving together
// batched through one forward by a batcher goroutine; or a decoder (Qwen3-Embedding style)
// whose embedding is its final hidden state at the last token (or their mean), run on a
// pooling engine with prefix caching and continuous batching. Its methods are safe for
// concurrent use.
type Embedder struct {
	name               string
	dim, maxLen, vocab int
	pooling            string
	pooled             pooler                                    // an encoder's
	eng                *Engine                                   // a decoder's pooling engine
	classify           func(pooled []float32) ([]float32, error) // nil without a head
	pairVocab          *tokenizer.Vocab                          // an encoder's, for TokenizePair
	tok                *tokenizer.Tokenizer                      // nil when the model has no vocabulary
	jobs               chan *embedJob
	quit               chan struct{} // closed by Close: the batcher stops, Embed refuses
	done               chan struct{} // closed by the batcher as it returns
	once               sync.Once
	max                int // MaxBatchTokens

	// Counters of what the batcher ran (EmbedStats).
	calls, inputs, tokens, forwards atomic.Int64
}

// EmbedStats counts what an Embedder ran since it opened (for metrics).
type EmbedStats struct {
	// Calls are the Embed (and Score) calls run, Inputs their sequences and Tokens the
	// tokens of those; Forwards the batched forwards that ran them.
	Calls, Inputs, Tokens, Forwards int64
	// UsedKVBlocks is the KV blocks a decoder's engine holds now (0 for an encoder, which
	// has no KV cache): back to 0 once no input is in flight.
	UsedKVBlocks int
}

// Stats returns the Embedder's counters (a decoder's Forwards are its engine's steps).
func (e *Embedder) Stats() EmbedStats {
	s := EmbedStats{Calls: e.calls.Load(), Inputs: e.inputs.Load(), Tokens: e.tokens.Load(), Forwards: e.forwards.Load()}
	if e.eng != nil {
		st := e.eng.Stats()
		s.Forwards, s.UsedKVBlocks = st.Steps, st.UsedBlocks
	}
	return s
}

// pooler runs sequences to one vector each (the batcher's forward) and releases the model.
type pooler interface {
	Forward(seqs []encoder.Sequence) ([][]float32, error)
	Close() error
}

// encoderPooler is an encoder with its backend and file, closed together.
type encoderPooler struct {
	*encoder.Encoder
	be backend.Backend
	f  *encoder.File
}

func (p encoderPooler) Close() error {
	return errors.Join(p.Encoder.Close(), p.be.Close(), p.f.Close())
}

// embedJob is one call's inputs waiting for the batcher, and where its answer goes.
type embedJob struct {
	ctx    context.Context
	inputs []encoder.Sequence
	tokens int
	out    chan embedResult
}

type embedResult struct {
	vecs [][]float32
	err  error
}

// IsEncoderModel reports whether path holds an encoder model that OpenEmbedder opens (a
// "bert", "nomic-bert" or "jina-bert-v2" GGUF, a Hugging Face BertModel,
// BertForSequenceClassification, NomicBertModel or JinaBert folder) rather than a generative
// one.
func IsEncoderModel(path string) bool { return encoder.IsEncoder(path) }

// encoderHint replaces err, the failure to open path as a generative model, by what to
// do with it when path holds an encoder model.
func encoderHint(path string, err error) error {
	if IsEncoderModel(path) {
		return fmt.Errorf("open %s: an encoder (embedding) model generates no text: serve it with kvasir serve, for /v1/embeddings, /v1/rerank and /v1/score", path)
	}
	return err
}

// OpenEmbedder opens the embedding model at path on opt.Device and starts its batcher: an
// encoder (IsEncoderModel), or a decoder run for its last token's hidden state, which
// needs opt.Pooling "last" or last-token pooling in the model's metadata (GGUF
// {arch}.pooling_type 3, sentence-transformers' 1_Pooling/config.json).
func OpenEmbedder(path string, opt EmbedderOptions) (*Embedder, error) {
	var pooling *backend.PoolMode
	if opt.Pooling != "" {
		p, err := encoder.ParsePooling(opt.Pooling)
		if err != nil {
			return nil, err
		}
		pooling = &p
	}
	e := &Embedder{jobs: make(chan *embedJob), quit: make(chan struct{}), done: make(chan struct{}), max: opt.MaxBatchTokens}
	if e.max <= 0 {
		e.max = DefaultEmbedBatchTokens
	}
	if !encoder.IsEncoder(path) {
		if err := e.openDecoder(path, opt, pooling); err != nil {
			return nil, err
		}
		close(e.done) // no batcher: the engine batches
		return e, nil
	}
	if err := e.openEncoder(path, opt, pooling); err != nil {
		return nil, err
	}
	go e.batch()
	return e, nil
}

// openEncoder binds an encoder model.
func (e *Embedder) openEncoder(path string, opt EmbedderOptions, pooling *backend.PoolMode) error {
	f, err := encoder.Open(path)
	if err != nil {
		return err
	}
	p := encoderPooler{f: f}
	fail := func(err error) error {
		if p.Encoder != nil {
			p.Encoder.Close()
		}
		if p.be != nil {
			p.be.Close()
		}
		f.Close()
		return err
	}
	if f.Vocab != nil {
		if e.tok, err = tokenizer.New(f.Vocab); err != nil {
			return fail(fmt.Errorf("open %s: %w", path, err))
		}
	}
	threads := opt.Threads
	if threads < 1 {
		threads = runtime.NumCPU()
	}
	if opt.Device.CUDA {
		p.be, err = cudabackend.NewBackend(cudabackend.BackendOptions{Ordinal: opt.Device.Ordinal})
	} else {
		p.be, err = cpubackend.NewKernels(threads, opt.CPUKernels)
	}
	if err != nil {
		return fail(fmt.Errorf("device %s: %w", opt.Device, err))
	}
	if p.Encoder, err = encoder.New(f, p.be, pooling); err != nil {
		return fail(err)
	}
	c := p.Config()
	e.name, e.dim, e.maxLen, e.vocab, e.pooling = f.Name(), c.Dim, c.MaxPositions, c.VocabSize, c.Pooling.String()
	e.pooled, e.pairVocab = p, f.Vocab
	if c.Labels > 0 {
		e.classify = p.Classify
	}
	return nil
}

// Close stops the batcher (the calls it has taken finish first; later ones fail with
// ErrClosed) and releases the model. Calling it again does nothing.
func (e *Embedder) Close() error {
	var err error
	e.once.Do(func() {
		close(e.quit)
		<-e.done
		if e.eng != nil {
			err = e.eng.Close()
			return
		}
		err = e.pooled.Close()
	})
	return err
}

// ModelName returns the model's file or folder name.
func (e *Embedder) ModelName() string { return e.name }

// Dim returns the size of the model's embeddings.
func (e *Embedder) Dim() int { return e.dim }

// MaxLen returns the most tokens one input may have: an encoder's positions, a decoder's
// context length bounded by what its engine's KV cache holds.
func (e *Embedder) MaxLen() int { return e.maxLen }

// VocabSize returns the number of token ids the model knows.
func (e *Embedder) VocabSize() int { return e.vocab }

// Pooling returns the pooling in use: "mean", "cls" or "last".
func (e *Embedder) Pooling() string { return e.pooling }

// HasClassifier reports whether the model is a cross-encoder (a classifier head that
// Score runs).
func (e *Embedder) HasClassifier() bool { return e.classify != nil }

// HasTokenizer reports whether the model came with a tokenizer (text inputs).
func (e *Embedder) HasTokenizer() bool { return e.tok != nil }

// Tokenize turns text into the model's input with the vocabulary's specials: [CLS] text
// [SEP] for an encoder, its BOS and EOS as the vocabulary asks for a decoder.
func (e *Embedder) Tokenize(text string) ([]int32, error) {
	if e.tok == nil {
		return nil, fmt.Errorf("model %s has no tokenizer", e.ModelName())
	}
	return encoder.Tokenize(e.tok, text), nil
}

// TokenizePair turns two texts into one cross-encoder input: [CLS] a [SEP] b [SEP], the
// tokens of b and its [SEP] in segment 1.
func (e *Embedder) TokenizePair(a, b string) (EmbedInput, error) {
	if e.tok == nil || e.pairVocab == nil {
		return EmbedInput{}, fmt.Errorf("model %s has no tokenizer for pairs of texts", e.ModelName())
	}
	toks, types := encoder.TokenizePair(e.tok, e.pairVocab, a, b)
	return EmbedInput{Tokens: toks, Types: types}, nil
}

// Embed returns each input's pooled embedding (Dim values, not normalized), batched with
// the other calls waiting. An input with no tokens, more than MaxLen or an id outside the
// vocabulary is refused with an error naming it (wrapping ErrTooLong for the length).
func (e *Embedder) Embed(ctx context.Context, inputs []EmbedInput) ([][]float32, error) {
	job := &embedJob{ctx: ctx, out: make(chan embedResult, 1)}
	for i, in := range inputs {
		switch {
		case len(in.Tokens) == 0:
			return nil, fmt.Errorf("input %d has no tokens", i)
		case len(in.Tokens) > e.MaxLen():
			return nil, fmt.Errorf("input %d: %d tokens, more than the model's %d: %w", i, len(in.Tokens), e.MaxLen(), ErrTooLong)
		}
		for j, t := range in.Tokens {
			if t < 0 || int(t) >= e.VocabSize() {
				return nil, fmt.Errorf("input %d token %d: id %d outside the vocabulary of %d", i, j, t, e.VocabSize())
			}
		}
		job.inputs = append(job.inputs, encoder.Sequence{Tokens: in.Tokens, Types: in.Types})
		job.tokens += len(in.Tokens)
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("no inputs")
	}
	if e.eng != nil {
		select {
		case <-e.quit:
			return nil, ErrClosed
		default:
		}
		return e.embedDecoder(ctx, inputs, job.tokens)
	}
	select {
	case e.jobs <- job:
	case <-e.quit:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-job.out:
		return r.vecs, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Score returns each input pair's relevance from the cross-encoder's head: the sigmoid of
// its first logit (as sentence-transformers' CrossEncoder and vLLM score a one-label
// model). It fails for a model without a classifier head.
func (e *Embedder) Score(ctx context.Context, pairs []EmbedInput) ([]float32, error) {
	if !e.HasClassifier() {
		return nil, fmt.Errorf("model %s has no classifier head", e.ModelName())
	}
	pooled, err := e.Embed(ctx, pairs)
	if err != nil {
		return nil, err
	}
	scores := make([]float32, len(pooled))
	for i, p := range pooled {
		logits, err := e.classify(p)
		if err != nil {
			return nil, err
		}
		scores[i] = float32(1 / (1 + math.Exp(-float64(logits[0]))))
	}
	return scores, nil
}

// batch is the batcher goroutine: it takes a job, gathers the jobs already waiting up to
// MaxBatchTokens, and runs them as one forward.
func (e *Embedder) batch() {
	defer close(e.done)
	var next *embedJob
	for {
		job := next
		next = nil
		if job == nil {
			select {
			case job = <-e.jobs:
			case <-e.quit:
				return
			}
		}
		group, tokens := []*embedJob{job}, job.tokens
	gather:
		for tokens < e.max {
			select {
			case j := <-e.jobs:
				if tokens+j.tokens > e.max {
					next = j
					break gather
				}
				group, tokens = append(group, j), tokens+j.tokens
			default:
				break gather
			}
		}
		e.run(group)
	}
}

// run embeds the inputs of the jobs still wanted, in forwards of at most MaxBatchTokens
// tokens (an input longer than that alone), and hands each job its part.
func (e *Embedder) run(group []*embedJob) {
	var live []*embedJob
	var seqs []encoder.Sequence
	for _, j := range group {
		if j.ctx.Err() != nil {
			j.out <- embedResult{err: j.ctx.Err()}
			continue
		}
		live = append(live, j)
		seqs = append(seqs, j.inputs...)
	}
	if len(live) == 0 {
		return
	}
	var vecs [][]float32
	var err error
	for start := 0; start < len(seqs) && err == nil; {
		end, tokens := start+1, len(seqs[start].Tokens)
		for end < len(seqs) && tokens+len(seqs[end].Tokens) <= e.max {
			tokens += len(seqs[end].Tokens)
			end++
		}
		var part [][]float32
		part, err = e.pooled.Forward(seqs[start:end])
		vecs, start = append(vecs, part...), end
		e.forwards.Add(1)
	}
	for _, j := range live {
		if err != nil {
			j.out <- embedResult{err: err}
			continue
		}
		e.calls.Add(1)
		e.inputs.Add(int64(len(j.inputs)))
		e.tokens.Add(int64(j.tokens))
		j.out <- embedResult{vecs: vecs[:len(j.inputs):len(j.inputs)]}
		vecs = vecs[len(j.inputs):]
	}
}
