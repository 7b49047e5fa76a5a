package kvasir

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/encoder"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// A decoder embedding model (Qwen3-Embedding and the like) embeds a text as its final
// hidden state, after the output norm, at the last token. The Embedder runs it through the
// decoder's own batched forward (model.ForwardHidden) over a scratch KV cache of its own:
// an embedding is one prefill and no decode, so the engine's scheduler, sampling and
// prefix cache would only hold blocks for nothing, and the Embedder's batcher already
// gathers concurrent calls into one forward, as it does for encoders.

// decoderBlockSize is the block size of a decoder embedder's scratch KV cache.
const decoderBlockSize = 16

// decoderPooler runs a decoder for its last tokens' hidden states.
type decoderPooler struct {
	l      *Loaded
	kv     *model.KVCache
	blocks int // blocks of kv
	dim    int
}

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

// openDecoder binds a decoder for last-token embeddings.
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
	case "last":
	case "":
		fm.Close()
		return fmt.Errorf("open %s: a %s decoder names no pooling: give pooling last (--pooling last) to embed with its last token", path, fm.Config.Arch)
	default:
		fm.Close()
		return fmt.Errorf("open %s: pooling %s on a %s decoder: a decoder embeds with its last token only (pooling last)", path, want, fm.Config.Arch)
	}
	// An F32 cache on every device (a GPU's default is BF16): the embedding is the output,
	// and one forward's cache is small beside the weights.
	l, err := Load(fm, Options{Device: opt.Device, Threads: opt.Threads, CPUKernels: opt.CPUKernels, KVCacheDType: KVCacheF32})
	if err != nil {
		fm.Close()
		return err
	}
	c := fm.Config
	// The cache holds one forward's tokens; each sequence rounds up to whole blocks, so
	// a few blocks more let a forward of many short inputs fill it.
	blocks := (e.max+decoderBlockSize-1)/decoderBlockSize + 64
	kv, err := l.Model().NewKVCache(blocks, decoderBlockSize)
	if err != nil {
		l.Close()
		return fmt.Errorf("open %s: embedding KV cache of %d blocks: %w", path, blocks, err)
	}
	e.pooled = &decoderPooler{l: l, kv: kv, blocks: blocks, dim: c.Dim}
	e.tok = l.Tokenizer()
	e.name, e.dim, e.vocab, e.pooling = fm.Name(), c.Dim, c.VocabSize, "last"
	e.maxLen = min(c.ContextLen, e.max)
	if c.ContextLen <= 0 {
		e.maxLen = e.max
	}
	return nil
}

// Forward runs the sequences in as few forwards as the cache's blocks allow and returns
// each one's last hidden state.
func (d *decoderPooler) Forward(seqs []encoder.Sequence) ([][]float32, error) {
	var out [][]float32
	for start := 0; start < len(seqs); {
		b := &model.Batch{}
		used := 0
		end := start
		for ; end < len(seqs); end++ {
			n := len(seqs[end].Tokens)
			nb := (n + decoderBlockSize - 1) / decoderBlockSize
			if used+nb > d.blocks {
				break
			}
			table := make([]int32, nb)
			for i := range table {
				table[i] = int32(used + i)
			}
			used += nb
			q := len(b.Tokens)
			for j, t := range seqs[end].Tokens {
				b.Tokens = append(b.Tokens, t)
				b.Positions = append(b.Positions, int32(j))
				b.SlotMapping = append(b.SlotMapping, table[j/decoderBlockSize]*decoderBlockSize+int32(j%decoderBlockSize))
			}
			b.Seqs = append(b.Seqs, model.Seq{BlockTable: table, QueryStart: q, QueryLen: n, ContextLen: n})
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		if end == start {
			return nil, fmt.Errorf("decoder embedding: input of %d tokens, more than the %d the cache holds", len(seqs[start].Tokens), d.blocks*decoderBlockSize)
		}
		h, err := d.l.Model().ForwardHidden(b, d.kv)
		if err != nil {
			return nil, fmt.Errorf("decoder embedding: %w", err)
		}
		for i := range end - start {
			out = append(out, h[i*d.dim:(i+1)*d.dim:(i+1)*d.dim])
		}
		start = end
	}
	return out, nil
}

// Close releases the model, its backends and its file.
func (d *decoderPooler) Close() error { return d.l.Close() }
