package kvasir

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/encoder"
	"github.com/kvasir-llm/kvasir/internal/engine"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
)

// A decoder embedding model (Qwen3-Embedding and the like) embeds a text as its final
// hidden state, after the output norm, at the last token (or their mean over the input's
// tokens). The Embedder runs it on a pooling engine (internal/engine, Config.Pooling): each
// input is a request through the engine's scheduler, paged KV cache and prefix cache, so
// that inputs sharing a long instruction prefix compute it once, and inputs of concurrent
// calls are batched step by step under the token budget (MaxBatchTokens) with chunked
// prefill, as generation requests are. Mean pooling takes no prefix hits (the hidden
// states of positions whose KV came from the cache were never computed).

// DecoderPooling returns the pooling the metadata of the generative model at path names
// for embeddings: "last" for a GGUF whose {arch}.pooling_type is 3 or a Hugging Face
// folder whose 1_Pooling/config.json asks for the last token; "" when it names none (the
// model generates text), and the other modes by name, which a decoder cannot run.
func DecoderPooling(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		p := filepath.Join(path, "1_Pooling", "config.json")
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		m, err := encoder.ReadPooling(p)
		if err != nil {
			return "invalid"
		}
		return m.String()
	}
	g, err := gguf.Open(path) // the header alone
	if err != nil {
		return ""
	}
	defer g.Close()
	v, ok := g.Get(g.Architecture() + ".pooling_type")
	if !ok {
		return ""
	}
	n, ok := v.Int64()
	if !ok {
		n = -1
	}
	return poolingName(n, v.Any())
}

// ggufPooling reads {arch}.pooling_type from fm's metadata (llama.cpp's numbering: 0
// none, 1 mean, 2 cls, 3 last, 4 rank); "" without the key or for none.
func ggufPooling(fm *format.Model) string {
	v, ok := fm.Metadata[fm.Config.Arch+".pooling_type"]
	if !ok {
		return ""
	}
	var n int64 = -1
	switch x := v.(type) {
	case uint32:
		n = int64(x)
	case int32:
		n = int64(x)
	case uint64:
		n = int64(x)
	case int64:
		n = x
	}
	return poolingName(n, v)
}

// poolingName names llama.cpp's pooling type n (raw: the metadata value, for an unknown
// one).
func poolingName(n int64, raw any) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "mean"
	case 2:
		return "cls"
	case 3:
		return "last"
	}
	return fmt.Sprintf("pooling_type %v", raw)
}

// openDecoder binds a decoder for last-token or mean embeddings on a pooling engine.
func (e *Embedder) openDecoder(path string, opt EmbedderOptions, pooling *backend.PoolMode) error {
	fm, err := format.Open(path, format.Options{})
	if err != nil {
		return err
	}
	want := ""
	if pooling != nil {
		want = pooling.String()
	} else if fm.Format == "gguf" {
		want = ggufPooling(fm)
	} else {
		want = DecoderPooling(path)
	}
	switch want {
	case engine.PoolLast, engine.PoolMean:
	case "":
		fm.Close()
		return fmt.Errorf("open %s: a %s decoder names no pooling: give pooling last (--pooling last) to embed with its last token", path, fm.Config.Arch)
	default:
		fm.Close()
		return fmt.Errorf("open %s: pooling %s on a %s decoder: a decoder embeds with its last token or the mean of its tokens (pooling last or mean)", path, want, fm.Config.Arch)
	}
	// An F32 cache on every device (a GPU's default is BF16): the embedding is the output.
	lopt := Options{Device: opt.Device, Threads: opt.Threads, CPUKernels: opt.CPUKernels, KVCacheDType: KVCacheF32}
	l, err := Load(fm, lopt)
	if err != nil {
		fm.Close()
		return err
	}
	lopt.MaxNumBatchedTokens, lopt.MaxNumSeqs = e.max, opt.MaxNumSeqs
	lopt.KVCacheMemory, lopt.GPUMemoryUtilization, lopt.DisablePrefixCaching = opt.KVCacheMemory, opt.GPUMemoryUtilization, opt.DisablePrefixCaching
	lopt.pooling = want
	eng, err := start(l, lopt)
	if err != nil {
		l.Close()
		return fmt.Errorf("open %s: %w", path, err)
	}
	c := fm.Config
	e.eng, e.tok = eng, l.Tokenizer()
	e.name, e.dim, e.vocab, e.pooling = fm.Name(), c.Dim, c.VocabSize, want
	e.maxLen = eng.MaxModelLen()
	return nil
}

// embedDecoder runs inputs as requests of the pooling engine, submitted together, and
// returns their embeddings in order. Cancelling ctx aborts them (their blocks are freed).
func (e *Embedder) embedDecoder(ctx context.Context, inputs []EmbedInput, tokens int) ([][]float32, error) {
	reqs := make([]Request, len(inputs))
	for i, in := range inputs {
		reqs[i] = Request{PromptTokens: in.Tokens}
	}
	chans, err := e.eng.GenerateAll(ctx, reqs)
	if err != nil {
		return nil, err
	}
	vecs := make([][]float32, len(inputs))
	var first error
	for i, ch := range chans {
		for out := range ch { // read to the end, also after a failure, so nothing leaks
			switch {
			case out.Err != nil:
				first = cmp.Or(first, fmt.Errorf("input %d: %w", i, out.Err))
			case out.FinishReason == engine.FinishAbort:
				first = cmp.Or(first, fmt.Errorf("input %d: aborted: %w", i, cmp.Or(ctx.Err(), ErrClosed)))
			case out.Embedding != nil:
				vecs[i] = out.Embedding
			}
		}
		if vecs[i] == nil && first == nil {
			first = fmt.Errorf("input %d: no embedding came back: %w", i, cmp.Or(ctx.Err(), ErrClosed))
		}
	}
	if first != nil {
		return nil, first
	}
	e.calls.Add(1)
	e.inputs.Add(int64(len(inputs)))
	e.tokens.Add(int64(tokens))
	return vecs, nil
}
