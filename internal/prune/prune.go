// Package prune sets weights of a model's linear layers to zero, or removes whole heads and
// layers, and writes the smaller model in the input's element type (F32, F16 or BF16) as a
// GGUF file or a Hugging Face folder that kvasir and llama.cpp load.
//
// Unstructured and N:M pruning (Prune) choose, in each output row of every block's seven
// weight matrices, the weights to zero by one of three measures:
//
//   - magnitude: |W_ij|, the weights alone;
//   - wanda (Sun et al., 2023): |W_ij| * ||X_j||, the weight times the norm of its input
//     channel over the calibration tokens;
//   - sparsegpt (Frantar and Alistarh, 2023): the OBS saliency, with the error of each
//     zeroed weight spread over the weights of the row not yet pruned (sparsegpt.go).
//
// Structured pruning (Structured, structured.go) drops the least important attention heads
// of every layer or the least important layers.
//
// Calibration runs the model layer by layer (package calibrate), each pruned layer's
// outputs feeding the next, so that one layer's float32 weights are held at a time.
package prune

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Methods lists the pruning methods.
var Methods = []string{"magnitude", "wanda", "sparsegpt"}

// Options controls Prune.
type Options struct {
	Method string // "magnitude", "wanda" or "sparsegpt"
	// Sparsity is the fraction of each row's weights set to zero, in [0, 1); ignored when
	// Pattern is set.
	Sparsity float64
	Pattern  Pattern
	// Calibration holds the token sequences (of one length) wanda and sparsegpt learn from.
	Calibration [][]int32
	Damp        float64 // sparsegpt: fraction of the Hessian's mean diagonal added to it (0: 0.01)
	BlockSize   int     // sparsegpt: columns per mask choice and lazy update (0: 128)
	Threads     int     // CPU threads (0: 1)
	// Log, if set, is told what happens, one line at a time.
	Log func(format string, args ...any)
	// LayerDone, if set, is told after each block is pruned.
	LayerDone func(done, total int)
	// Progress, if set, is told the bytes of the output written.
	Progress func(done, total int64)
}

// linearNames are the weight matrices of a block that Prune prunes.
var linearNames = []string{"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
	"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}

// Prune writes m, with the weights opt selects set to zero, to out (a .gguf file or a
// Hugging Face folder), through a temporary file or folder renamed into place: a failure
// leaves nothing behind.
func Prune(m *format.Model, out string, opt Options) error {
	if !slices.Contains(Methods, opt.Method) {
		return fmt.Errorf("prune: unknown method %q: want one of %s", opt.Method, strings.Join(Methods, ", "))
	}
	if opt.Pattern.IsZero() && (opt.Sparsity < 0 || opt.Sparsity >= 1 || math.IsNaN(opt.Sparsity)) {
		return fmt.Errorf("prune: sparsity %g is outside [0, 1)", opt.Sparsity)
	}
	c := m.Config
	check := c
	if opt.Method == "magnitude" {
		// Magnitude pruning reads only the weights: the rotary scaling and attention window
		// the calibration forward pass cannot run do not matter to it (Llama 3's shapes).
		check.Scaling, check.SlidingWindow = format.RopeScaling{}, 0
	}
	if err := calibrate.Check(check); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	if err := checkLinear(m, opt.Pattern); err != nil {
		return err
	}
	if opt.Method != "magnitude" && len(opt.Calibration) == 0 {
		return fmt.Errorf("prune: %s needs calibration text (it is empty or shorter than one window)", opt.Method)
	}
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := cpu.NewPool(max(opt.Threads, 1))
	defer p.Close()
	pr := &pruner{m: m, opt: opt, p: p, encoded: map[string]*format.Tensor{}}
	done := func(l int, ly *calibrate.Layer) error {
		if err := pr.layerDone(l, ly); err != nil {
			return err
		}
		if opt.LayerDone != nil {
			opt.LayerDone(l+1, c.Layers)
		}
		return nil
	}
	if opt.Method == "magnitude" {
		for l := range c.Layers {
			ly, err := calibrate.LoadLayer(m, l)
			if err != nil {
				return err
			}
			for _, w := range linear(ly) {
				pr.pruneScored(w, nil)
			}
			if err := done(l, ly); err != nil {
				return err
			}
		}
	} else {
		_, err := calibrate.Run(m, opt.Calibration, p,
			func(l int) (*calibrate.Layer, error) { return calibrate.LoadLayer(m, l) },
			pr.visit, done)
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
	}
	logf("%.2f%% of the blocks' linear weights are zero", 100*float64(pr.zeros)/float64(max(pr.total, 1)))
	var tensors []*format.Tensor
	for _, t := range m.Tensors {
		if e, ok := pr.encoded[t.Name]; ok {
			t = e
		}
		tensors = append(tensors, t)
	}
	return Write(m.WithTensors(tensors), out, opt.Progress)
}

// checkLinear refuses a model whose block matrices Prune cannot re-encode as they are
// (quantized types) or whose rows are not whole groups of the pattern.
func checkLinear(m *format.Model, pat Pattern) error {
	for l := range m.Config.Layers {
		for _, n := range linearNames {
			name := fmt.Sprintf("blk.%d.%s", l, n)
			t, ok := m.Tensor(name)
			if !ok {
				return fmt.Errorf("prune: the model has no tensor %q", name)
			}
			if !isFloat(t.Type) {
				return fmt.Errorf("prune: tensor %q is %s: prune a F32, F16 or BF16 model (and quantize after pruning)", name, t.Type)
			}
			if _, cols := t.Rows(); !pat.IsZero() && cols%pat.M != 0 {
				return fmt.Errorf("prune: tensor %q has %d columns, not a multiple of the pattern %s's group of %d", name, cols, pat, pat.M)
			}
		}
	}
	return nil
}

func isFloat(t quant.Type) bool { return t == quant.F32 || t == quant.F16 || t == quant.BF16 }

func linear(ly *calibrate.Layer) []*calibrate.Dense {
	return []*calibrate.Dense{ly.Q, ly.K, ly.V, ly.O, ly.Gate, ly.Up, ly.Down}
}

type pruner struct {
	m            *format.Model
	opt          Options
	p            *cpu.Pool
	encoded      map[string]*format.Tensor
	zeros, total int64
}

// visit prunes one stage's linear layers with what its input teaches.
func (pr *pruner) visit(s *calibrate.Stage) error {
	if pr.opt.Method == "wanda" {
		norms := ColumnNorms(s.Input)
		for _, w := range s.Linear {
			pr.pruneScored(w, norms)
		}
		return nil
	}
	h, err := NewHessian(pr.p, s.Input, pr.opt.Damp)
	if err != nil {
		return fmt.Errorf("layer %d %s: %w", s.Layer, s.Kind, err)
	}
	for _, w := range s.Linear {
		if err := SparseGPT(pr.p, w, h, pr.opt.Sparsity, pr.opt.Pattern, pr.opt.BlockSize); err != nil {
			return err
		}
	}
	return nil
}

// pruneScored zeroes the weights of w with the lowest |W_ij| * norms[j] (|W_ij| when norms
// is nil) in each row.
func (pr *pruner) pruneScored(w *calibrate.Dense, norms []float64) {
	score := make([]float64, len(w.Data))
	for i, v := range w.Data {
		s := float64(v)
		if s < 0 {
			s = -s
		}
		if norms != nil {
			s *= norms[i%w.Cols]
		}
		score[i] = s
	}
	mask := Mask(score, w.Rows, w.Cols, pr.opt.Sparsity, pr.opt.Pattern)
	for i, keep := range mask {
		if !keep {
			w.Data[i] = 0
		}
	}
}

// ColumnNorms returns the L2 norm of each column of x over its rows (tokens): Wanda's
// input-channel norms.
func ColumnNorms(x *calibrate.Dense) []float64 {
	n := make([]float64, x.Cols)
	for t := range x.Rows {
		for j, v := range x.Row(t) {
			n[j] += float64(v) * float64(v)
		}
	}
	for j := range n {
		n[j] = math.Sqrt(n[j])
	}
	return n
}

// layerDone encodes a pruned layer's matrices in their source types.
func (pr *pruner) layerDone(_ int, ly *calibrate.Layer) error {
	for _, w := range linear(ly) {
		for _, v := range w.Data {
			if v == 0 {
				pr.zeros++
			}
		}
		pr.total += int64(len(w.Data))
		t, err := encodeLike(pr.m, w)
		if err != nil {
			return err
		}
		pr.encoded[w.Name] = t
	}
	return nil
}

// encodeLike encodes d in the type and shape of m's tensor of that name.
func encodeLike(m *format.Model, d *calibrate.Dense) (*format.Tensor, error) {
	src, ok := m.Tensor(d.Name)
	if !ok {
		return nil, fmt.Errorf("prune: the model has no tensor %q", d.Name)
	}
	return encode(d, src.Type, src.Shape)
}

// encode encodes d in type t with the given shape.
func encode(d *calibrate.Dense, t quant.Type, shape []int) (*format.Tensor, error) {
	rb, err := t.RowBytes(d.Cols)
	if err != nil {
		return nil, fmt.Errorf("prune: tensor %q: %w", d.Name, err)
	}
	data := make([]byte, d.Rows*rb)
	if err := quant.Quantize(t, d.Data, data); err != nil {
		return nil, fmt.Errorf("prune: tensor %q: %w", d.Name, err)
	}
	return &format.Tensor{Name: d.Name, Type: t, Shape: shape, Data: data}, nil
}
