package synth

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Target is the kind of file a synthesized model is written to.
type Target int

const (
	// GGUF follows llama.cpp's conventions: q/k rows of the "llama" architecture in the
	// interleaved rotary order, each layer's experts stacked in one 3-D tensor, and Llama 3
	// rotary scaling carried as the rope_freqs.weight tensor.
	GGUF Target = iota
	// HF follows Hugging Face's: rows in the NeoX rotary order and one tensor per expert.
	HF
)

// kind is how a tensor's values are drawn.
type kind int

const (
	linear kind = iota // uniform with variance 1/fan-in
	norm               // 1 ± 0.1
	bias               // ± 0.1
)

// spec describes one tensor to synthesize.
type spec struct {
	name  string
	shape []int // outermost first
	kind  kind
	float bool // always stored as F32 (norms, biases), as llama.cpp keeps them
	// permuteHeads, when > 0, reorders rows into the interleaved rotary layout.
	permuteHeads int
	// expertBase names the per-expert tensors ("blk.0.ffn_up") a stacked tensor holds, so
	// that each expert's rows get the values of its own tensor in a per-expert file.
	expertBase string
}

// specs lists the tensors of a model with config c, in GGUF naming and file order.
func specs(c format.Config, target Target) []spec {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	permQ, permK := 0, 0
	if target == GGUF && c.RopeStyle == format.RopeInterleaved {
		permQ, permK = c.Heads, c.KVHeads
	}
	out := []spec{{name: "token_embd.weight", shape: []int{c.VocabSize, c.Dim}}}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		if !c.NoPreNorms {
			out = append(out, spec{name: p + "attn_norm.weight", shape: []int{c.Dim}, kind: norm, float: true})
		}
		if c.Arch == "phi3" {
			// Phi-3 fuses q, k and v, and the MLP's gate and up (gate first), in both files.
			out = append(out,
				spec{name: p + "attn_qkv.weight", shape: []int{q + 2*kv, c.Dim}},
				spec{name: p + "attn_output.weight", shape: []int{c.Dim, q}},
				spec{name: p + "ffn_norm.weight", shape: []int{c.Dim}, kind: norm, float: true},
				spec{name: p + "ffn_up.weight", shape: []int{2 * c.FFNDim, c.Dim}},
				spec{name: p + "ffn_down.weight", shape: []int{c.Dim, c.FFNDim}})
			continue
		}
		if c.MLA() {
			out = append(out, mlaSpecs(c, p)...)
		} else {
			out = append(out,
				spec{name: p + "attn_q.weight", shape: []int{q, c.Dim}, permuteHeads: permQ},
				spec{name: p + "attn_k.weight", shape: []int{kv, c.Dim}, permuteHeads: permK},
				spec{name: p + "attn_v.weight", shape: []int{kv, c.Dim}},
			)
		}
		if c.QKVBias {
			out = append(out,
				spec{name: p + "attn_q.bias", shape: []int{q}, kind: bias, float: true, permuteHeads: permQ},
				spec{name: p + "attn_k.bias", shape: []int{kv}, kind: bias, float: true, permuteHeads: permK},
				spec{name: p + "attn_v.bias", shape: []int{kv}, kind: bias, float: true})
		}
		if c.QKNorm {
			qn, kn := c.HeadDim, c.HeadDim
			if c.QKNormFull {
				qn, kn = q, kv // OLMo 2: one norm over all heads
			}
			out = append(out,
				spec{name: p + "attn_q_norm.weight", shape: []int{qn}, kind: norm, float: true},
				spec{name: p + "attn_k_norm.weight", shape: []int{kn}, kind: norm, float: true})
		}
		if !c.MLA() {
			out = append(out, spec{name: p + "attn_output.weight", shape: []int{c.Dim, q}})
		}
		if !c.NoPreNorms {
			out = append(out, spec{name: p + "ffn_norm.weight", shape: []int{c.Dim}, kind: norm, float: true})
		}
		if c.PostNorms {
			out = append(out,
				spec{name: p + "post_attention_norm.weight", shape: []int{c.Dim}, kind: norm, float: true},
				spec{name: p + "post_ffw_norm.weight", shape: []int{c.Dim}, kind: norm, float: true})
		}
		if !c.MoELayer(i) {
			out = append(out,
				spec{name: p + "ffn_gate.weight", shape: []int{c.FFNDim, c.Dim}},
				spec{name: p + "ffn_up.weight", shape: []int{c.FFNDim, c.Dim}},
				spec{name: p + "ffn_down.weight", shape: []int{c.Dim, c.FFNDim}})
			continue
		}
		out = append(out, spec{name: p + "ffn_gate_inp.weight", shape: []int{c.Experts, c.Dim}, float: true})
		if c.ExpertSigmoid {
			// DeepSeek-V3's selection bias, in llama.cpp's place of it (after the router).
			out = append(out, spec{name: p + "exp_probs_b.bias", shape: []int{c.Experts}, kind: bias, float: true})
		}
		e, f := c.Experts, c.ExpertFFNDim
		if target == GGUF {
			out = append(out,
				spec{name: p + "ffn_gate_exps.weight", shape: []int{e, f, c.Dim}, expertBase: p + "ffn_gate"},
				spec{name: p + "ffn_up_exps.weight", shape: []int{e, f, c.Dim}, expertBase: p + "ffn_up"},
				spec{name: p + "ffn_down_exps.weight", shape: []int{e, c.Dim, f}, expertBase: p + "ffn_down"})
		} else {
			for x := 0; x < e; x++ {
				out = append(out,
					spec{name: fmt.Sprintf("%sffn_gate.%d.weight", p, x), shape: []int{f, c.Dim}},
					spec{name: fmt.Sprintf("%sffn_up.%d.weight", p, x), shape: []int{f, c.Dim}},
					spec{name: fmt.Sprintf("%sffn_down.%d.weight", p, x), shape: []int{c.Dim, f}})
			}
		}
		if c.SharedExpertFFN > 0 {
			s := c.SharedExpertFFN
			if c.SharedExpertGated() {
				out = append(out, spec{name: p + "ffn_gate_inp_shexp.weight", shape: []int{c.Dim}, float: true})
			}
			out = append(out,
				spec{name: p + "ffn_gate_shexp.weight", shape: []int{s, c.Dim}},
				spec{name: p + "ffn_up_shexp.weight", shape: []int{s, c.Dim}},
				spec{name: p + "ffn_down_shexp.weight", shape: []int{c.Dim, s}})
		}
	}
	out = append(out, spec{name: "output_norm.weight", shape: []int{c.Dim}, kind: norm, float: true})
	if !c.TiedEmbeddings {
		out = append(out, spec{name: "output.weight", shape: []int{c.VocabSize, c.Dim}})
	}
	return out
}

// mlaSpecs lists the attention tensors of one layer (prefix p) of a model with multi-head
// latent attention, as llama.cpp's "deepseek2" names them; both files keep the rotary
// pairs interleaved, so nothing is permuted.
func mlaSpecs(c format.Config, p string) []spec {
	q := c.Heads * (c.QKNopeDim + c.RopeDim)
	var out []spec
	if c.QLoRARank > 0 {
		out = append(out,
			spec{name: p + "attn_q_a.weight", shape: []int{c.QLoRARank, c.Dim}},
			spec{name: p + "attn_q_a_norm.weight", shape: []int{c.QLoRARank}, kind: norm, float: true},
			spec{name: p + "attn_q_b.weight", shape: []int{q, c.QLoRARank}})
	} else {
		out = append(out, spec{name: p + "attn_q.weight", shape: []int{q, c.Dim}})
	}
	return append(out,
		spec{name: p + "attn_kv_a_mqa.weight", shape: []int{c.KVLoRARank + c.RopeDim, c.Dim}},
		spec{name: p + "attn_kv_a_norm.weight", shape: []int{c.KVLoRARank}, kind: norm, float: true},
		spec{name: p + "attn_kv_b.weight", shape: []int{c.Heads * (c.QKNopeDim + c.VHeadDim), c.KVLoRARank}},
		spec{name: p + "attn_output.weight", shape: []int{c.Dim, c.Heads * c.VHeadDim}})
}

// Tensors returns the tensors of a random model with config c, weights in dtype (a weight
// whose rows are not a whole number of dtype's blocks falls back to F16; norms and biases
// are F32). Values depend only on seed and the tensor's name and row, so they are the same
// whatever the dtype, target or number of threads: a GGUF and an HF twin hold one model.
// Data is produced when written.
func Tensors(c format.Config, dtype quant.Type, seed uint64, target Target) ([]format.OutTensor, error) {
	return TensorsTyped(c, func(string, []int) quant.Type { return dtype }, seed, target)
}

// TensorsTyped is Tensors with each weight matrix's type chosen by typeOf from its name and
// shape (outermost first), as a mixed preset such as Q4_K_M chooses them; the same
// fallback to F16 applies.
func TensorsTyped(c format.Config, typeOf func(name string, shape []int) quant.Type, seed uint64, target Target) ([]format.OutTensor, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var out []format.OutTensor
	for _, s := range specs(c, target) {
		t := typeOf(s.name, s.shape)
		cols := s.shape[len(s.shape)-1]
		if s.float {
			t = quant.F32
		} else if cols%t.BlockSize() != 0 {
			t = quant.F16
		}
		out = append(out, format.OutTensor{Name: s.name, Type: t, Shape: s.shape, Write: writer(s, t, seed)})
	}
	if c.Scaling.Type == "llama3" && target == GGUF {
		// llama.cpp carries Llama 3 rotary scaling as a tensor of frequency divisors.
		freqs := format.Llama3RopeFreqs(c)
		data := make([]byte, 4*len(freqs))
		if err := quant.Quantize(quant.F32, freqs, data); err != nil {
			return nil, err
		}
		out = append(out, format.OutTensor{Name: "rope_freqs.weight", Type: quant.F32, Shape: []int{len(freqs)}, Data: data})
	}
	return out, nil
}

// writer returns a function that generates and writes the tensor's rows, many rows at a
// time in parallel.
func writer(s spec, t quant.Type, seed uint64) func(w io.Writer) error {
	return func(w io.Writer) error {
		cols := s.shape[len(s.shape)-1]
		rows := 1
		for _, d := range s.shape[:len(s.shape)-1] {
			rows *= d
		}
		rowBytes, err := t.RowBytes(cols)
		if err != nil {
			return fmt.Errorf("synth %s: %w", s.name, err)
		}
		// A 1-D tensor with head permutation (a q/k bias) permutes its elements.
		if len(s.shape) == 1 && s.permuteHeads > 0 {
			return writePermutedVector(w, s, seed)
		}
		base := nameSeed(seed, s.name)
		const chunkRows = 256
		workers := runtime.GOMAXPROCS(0)
		buf := make([]byte, chunkRows*rowBytes)
		for start := 0; start < rows; start += chunkRows {
			n := min(chunkRows, rows-start)
			var wg sync.WaitGroup
			var firstErr error
			var mu sync.Mutex
			for wk := 0; wk < workers; wk++ {
				wg.Add(1)
				go func(wk int) {
					defer wg.Done()
					vals := make([]float32, cols)
					for r := wk; r < n; r += workers {
						rowSeed, src := base, sourceRow(start+r, rows, s.permuteHeads)
						if s.expertBase != "" {
							perExpert := rows / s.shape[0]
							rowSeed = nameSeed(seed, fmt.Sprintf("%s.%d.weight", s.expertBase, src/perExpert))
							src %= perExpert
						}
						fillRow(vals, rowSeed, uint64(src), s.kind, cols)
						if err := quant.Quantize(t, vals, buf[r*rowBytes:(r+1)*rowBytes]); err != nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
							return
						}
					}
				}(wk)
			}
			wg.Wait()
			if firstErr != nil {
				return fmt.Errorf("synth %s: %w", s.name, firstErr)
			}
			if _, err := w.Write(buf[:n*rowBytes]); err != nil {
				return err
			}
		}
		return nil
	}
}

// writePermutedVector writes a 1-D F32 tensor whose elements follow head rows (a q or k
// bias) in the interleaved order.
func writePermutedVector(w io.Writer, s spec, seed uint64) error {
	n := s.shape[0]
	vals := make([]float32, n)
	fillRow(vals, nameSeed(seed, s.name), 0, s.kind, n)
	out := make([]float32, n)
	for i := range out {
		out[i] = vals[sourceRow(i, n, s.permuteHeads)]
	}
	data := make([]byte, 4*n)
	if err := quant.Quantize(quant.F32, out, data); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// sourceRow returns which row of the Hugging Face layout lands at row r of the output when
// rows are permuted into the interleaved rotary layout for the given number of heads.
func sourceRow(r, rows, heads int) int {
	if heads == 0 {
		return r
	}
	hd := rows / heads
	return r/hd*hd + format.InterleavedToNeox(r%hd, hd)
}

// nameSeed mixes the model seed with a tensor's name.
func nameSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix(seed ^ h.Sum64())
}

// splitmix is the SplitMix64 finalizer: a good 64-bit mix of its input.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fillRow fills vals with row row's values of a tensor with the given seed.
func fillRow(vals []float32, seed, row uint64, k kind, fanIn int) {
	state := splitmix(seed ^ splitmix(row))
	var scale, offset float32
	switch k {
	case linear:
		scale = float32(math.Sqrt(3 / float64(fanIn))) // uniform(-a, a) has variance a²/3
	case norm:
		scale, offset = 0.1, 1
	case bias:
		scale = 0.1
	}
	for i := range vals {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		u := float32(z>>40)/float32(1<<24)*2 - 1 // uniform in [-1, 1)
		vals[i] = offset + scale*u
	}
}
