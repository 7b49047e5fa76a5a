package format

import (
	"fmt"
	"io"
	"math"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// OutTensor is one tensor to write: its GGUF name, type and shape (outermost first), and
// its bytes, held in Data or produced by Write (for tensors too large to hold at once).
type OutTensor struct {
	Name  string
	Type  quant.Type
	Shape []int
	Data  []byte
	Write func(w io.Writer) error
}

// Size returns the number of bytes the tensor's data occupies.
func (t *OutTensor) Size() (int64, error) {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	cols := 1
	if len(t.Shape) > 0 {
		cols = t.Shape[len(t.Shape)-1]
	}
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return int64(n/max(cols, 1)) * int64(rb), nil
}

// writeTo writes the tensor's bytes to w.
func (t *OutTensor) writeTo(w io.Writer) error {
	if t.Write != nil {
		return t.Write(w)
	}
	_, err := w.Write(t.Data)
	return err
}

// Contents is everything a model file holds besides its tensors.
type Contents struct {
	Name         string // general.name
	Config       Config
	Vocab        *tokenizer.Vocab // may be nil
	ChatTemplate string
}

// GGUFMetadata returns the standard llama.cpp metadata keys describing c.
func (c Contents) GGUFMetadata(fileType quant.Type) []gguf.KV {
	cfg := c.Config
	arch := cfg.Arch
	u := func(key string, v int) gguf.KV { return gguf.KV{Key: arch + "." + key, Value: gguf.Uint32(uint32(v))} }
	f := func(key string, v float64) gguf.KV {
		return gguf.KV{Key: arch + "." + key, Value: gguf.Float32(float32(v))}
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String(arch)},
		{Key: "general.name", Value: gguf.String(c.Name)},
		{Key: "general.file_type", Value: gguf.Uint32(uint32(llamaFileType(fileType)))},
		{Key: "general.quantization_version", Value: gguf.Uint32(2)},
		u("context_length", cfg.ContextLen),
		u("embedding_length", cfg.Dim),
		u("block_count", cfg.Layers),
		u("feed_forward_length", cfg.FFNDim),
		u("attention.head_count", cfg.Heads),
		u("attention.head_count_kv", cfg.KVHeads),
		u("attention.key_length", cfg.HeadDim),
		u("attention.value_length", cfg.HeadDim),
		f("attention.layer_norm_rms_epsilon", cfg.NormEps),
		f("rope.freq_base", cfg.RopeTheta),
		u("rope.dimension_count", cfg.RopeDim),
		u("vocab_size", cfg.VocabSize),
	}
	switch cfg.Scaling.Type {
	case "", "llama3":
		// Llama 3 scaling travels as the rope_freqs.weight tensor, as llama.cpp does.
	default:
		kvs = append(kvs,
			gguf.KV{Key: arch + ".rope.scaling.type", Value: gguf.String(cfg.Scaling.Type)},
			f("rope.scaling.factor", cfg.Scaling.Factor),
			u("rope.scaling.original_context_length", cfg.Scaling.OriginalContextLen))
	}
	if cfg.Experts > 0 {
		kvs = append(kvs, u("expert_count", cfg.Experts), u("expert_used_count", cfg.ExpertsUsed),
			gguf.KV{Key: arch + ".expert_weights_norm", Value: gguf.Bool(cfg.NormTopKProbs)})
		if cfg.ExpertFFNDim != cfg.FFNDim {
			kvs = append(kvs, u("expert_feed_forward_length", cfg.ExpertFFNDim))
		}
		if cfg.SharedExpertFFN > 0 {
			kvs = append(kvs, u("expert_shared_feed_forward_length", cfg.SharedExpertFFN))
		}
	}
	if cfg.SlidingWindow > 0 {
		kvs = append(kvs, u("attention.sliding_window", cfg.SlidingWindow))
	}
	if isGemma(arch) {
		kvs = append(kvs, gemmaGGUFMetadata(cfg)...)
	}
	if arch == "granite" {
		kvs = append(kvs, graniteGGUFMetadata(cfg)...)
	}
	if cfg.MLA() {
		kvs = deepseek2GGUFMetadata(cfg, kvs)
	}
	if c.Vocab != nil {
		kvs = append(kvs, vocabMetadata(c.Vocab)...)
	}
	if c.ChatTemplate != "" {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(c.ChatTemplate)})
	}
	return kvs
}

// llamaFileType returns llama.cpp's general.file_type number for a model mostly of type t.
func llamaFileType(t quant.Type) int {
	switch t {
	case quant.F32:
		return 0
	case quant.F16:
		return 1
	case quant.Q4_0:
		return 2
	case quant.Q4_1:
		return 3
	case quant.Q8_0:
		return 7
	case quant.Q5_0:
		return 8
	case quant.Q5_1:
		return 9
	case quant.Q2_K:
		return 10
	case quant.Q3_K:
		return 12 // Q3_K_M
	case quant.Q4_K:
		return 15 // Q4_K_M
	case quant.Q5_K:
		return 17 // Q5_K_M
	case quant.Q6_K:
		return 18
	case quant.BF16:
		return 32
	}
	return 0
}

// WriteGGUF writes a GGUF file holding c's metadata and the tensors (in GGUF naming and in
// the layout the GGUF architecture expects). progress, if set, is told the bytes written.
func WriteGGUF(path string, c Contents, fileType quant.Type, tensors []OutTensor, progress func(done, total int64)) error {
	if err := vocabFitsGGUF(c.Vocab); err != nil {
		return err
	}
	if isGemma(c.Config.Arch) {
		if err := checkGemmaGGUF(c.Config); err != nil {
			return err
		}
	}
	wts := make([]gguf.WriterTensor, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		dims := make([]uint64, len(t.Shape))
		for j, d := range t.Shape {
			dims[len(t.Shape)-1-j] = uint64(d)
		}
		wts[i] = gguf.WriterTensor{Name: t.Name, Type: t.Type, Dims: dims, Data: t.Data}
		if t.Write != nil {
			wts[i].WriteData = t.Write
		}
	}
	return gguf.WriteFile(path, c.GGUFMetadata(fileType), wts, progress)
}

// Llama3RopeFreqs returns the per-dimension-pair divisors of the rotary frequencies that
// Llama 3's long-context scaling applies (llama.cpp's rope_freqs.weight): 1 for high
// frequencies, Factor for low ones, and a smooth blend between.
func Llama3RopeFreqs(c Config) []float32 {
	s := c.Scaling
	half := c.RopeDim / 2
	out := make([]float32, half)
	lowWavelen := float64(s.OriginalContextLen) / s.LowFreqFactor
	highWavelen := float64(s.OriginalContextLen) / s.HighFreqFactor
	for i := 0; i < half; i++ {
		freq := 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.RopeDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(s.Factor)
		default:
			smooth := (float64(s.OriginalContextLen)/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/s.Factor + smooth))
		}
	}
	return out
}

// InterleavedToNeox returns which row of a head's NeoX order (pairs (i, i+hd/2)) holds row r
// of the interleaved order (pairs (2i, 2i+1)), for a head of hd rows: interleaved row 2i+j
// is NeoX row j*hd/2+i.
func InterleavedToNeox(r, hd int) int { return (r%2)*hd/2 + r/2 }

// NeoxToInterleaved is the inverse of InterleavedToNeox: which interleaved row holds NeoX
// row r.
func NeoxToInterleaved(r, hd int) int { return 2*(r%(hd/2)) + r/(hd/2) }

// PermuteRows returns a writer of t's rows reordered between the Hugging Face (NeoX) and
// the interleaved rotary layout of a q or k projection with the given number of heads.
// toInterleaved selects the direction. Whole rows move, so any element type works.
func PermuteRows(t *Tensor, heads int, toInterleaved bool) (func(w io.Writer) error, error) {
	rows, cols := t.Rows()
	if heads <= 0 || rows%heads != 0 || (rows/heads)%2 != 0 {
		return nil, fmt.Errorf("tensor %q: %d rows do not split into %d heads of even size", t.Name, rows, heads)
	}
	rowBytes, err := t.Type.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	hd := rows / heads
	return func(w io.Writer) error {
		for h := 0; h < heads; h++ {
			for r := 0; r < hd; r++ {
				src := InterleavedToNeox(r, hd)
				if !toInterleaved {
					src = NeoxToInterleaved(r, hd)
				}
				off := (h*hd + src) * rowBytes
				if _, err := w.Write(t.Data[off : off+rowBytes]); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil
}
