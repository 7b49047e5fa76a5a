// Package quantize re-encodes a model's weights in fewer bits and writes it as a GGUF file
// that kvasir and llama.cpp both load, by one of three post-training methods:
//
//   - rtn: each block rounded to the nearest point of its type's grid (llama-quantize's
//     method; with an importance matrix, the block scales that least change the important
//     channels' weights);
//   - gptq: each linear layer quantized column by column with Hessian error compensation
//     from its inputs on calibration text (gptq.go);
//   - awq: activation-aware per-channel scales searched on calibration text and folded into
//     the preceding norm or layer, each block's weight range clipped where that lowers its
//     output error, then round-to-nearest (awq.go).
//
// Calibration runs the model layer by layer (package calibrate), the quantized layers'
// outputs feeding the next, so that only one layer's float32 weights are held at a time.
package quantize

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Methods lists the quantization methods.
var Methods = []string{"rtn", "gptq", "awq"}

// Options controls Quantize.
type Options struct {
	Plan   Plan
	Method string // "rtn" (default), "gptq" or "awq"
	// Calibration holds the token sequences (of one length) gptq and awq learn from.
	Calibration [][]int32
	// Importance maps weight names to per-input-channel mean squares (an imatrix file's);
	// nil for none.
	Importance map[string][]float32
	GPTQ       GPTQOptions
	AWQ        AWQOptions
	Threads    int // CPU threads (0: 1)
	// Log, if set, is told what happens, one line at a time.
	Log func(format string, args ...any)
	// Progress, if set, is told the bytes of the output written.
	Progress func(done, total int64)
}

// Quantize writes m, re-encoded as opt says, to the GGUF file out (through a temporary
// file renamed into place: a failure leaves nothing behind).
func Quantize(m *format.Model, out string, opt Options) error {
	if !strings.HasSuffix(out, ".gguf") {
		return fmt.Errorf("quantize: the output %q must be a .gguf file", out)
	}
	if opt.Method == "" {
		opt.Method = "rtn"
	}
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c := m.Config
	_, hasOutput := m.Tensor("output.weight")
	tied := c.TiedEmbeddings || !hasOutput
	types := map[string]quant.Type{}
	for _, t := range m.Tensors {
		types[t.Name] = opt.Plan.TypeFor(t.Name, t.Shape, c.Layers, tied)
	}
	q := &quantizer{m: m, opt: opt, types: types, encoded: map[string]*format.Tensor{}}
	switch opt.Method {
	case "rtn":
	case "gptq", "awq":
		if err := calibrate.Check(c); err != nil {
			return fmt.Errorf("quantize: %s: %w", opt.Method, err)
		}
		if len(opt.Calibration) == 0 {
			return fmt.Errorf("quantize: %s needs calibration text (it is empty or shorter than one window)", opt.Method)
		}
		if opt.Method == "gptq" {
			for l := range c.Layers {
				for _, n := range linearNames {
					name := fmt.Sprintf("blk.%d.%s", l, n)
					if t := types[name]; isBlockType(t) && !HasGPTQ(t) {
						return fmt.Errorf("quantize: gptq: %s would be %s; GPTQ here quantizes onto q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k and q6_k grids (use --method rtn or awq for %s)", name, t, t)
					}
				}
			}
		}
	default:
		return fmt.Errorf("quantize: unknown method %q: want one of %s", opt.Method, strings.Join(Methods, ", "))
	}
	p := cpu.NewPool(max(opt.Threads, 1))
	defer p.Close()
	if opt.Method == "gptq" && opt.GPTQ.AutoDamp {
		damp, _, err := ChooseDamp(m, p, opt.Calibration, types, opt.GPTQ, logf)
		if err != nil {
			return fmt.Errorf("quantize: %w", err)
		}
		logf("damp %g chosen", damp)
		q.opt.GPTQ.Damp, q.opt.GPTQ.AutoDamp = damp, false
	}
	if opt.Method != "rtn" {
		start := time.Now()
		_, err := calibrate.Run(m, opt.Calibration, p,
			func(l int) (*calibrate.Layer, error) { return calibrate.LoadLayer(m, l) },
			func(s *calibrate.Stage) error { return q.visit(p, s) },
			func(l int, ly *calibrate.Layer) error {
				logf("layer %d/%d done (%s, %.1f s)", l+1, c.Layers, opt.Method, time.Since(start).Seconds())
				return q.layerDone(ly)
			})
		if err != nil {
			return fmt.Errorf("quantize: %w", err)
		}
	}
	// Everything not encoded by calibration: round to nearest.
	var tensors []*format.Tensor
	for _, t := range m.Tensors {
		e, ok := q.encoded[t.Name]
		if !ok {
			var err error
			if e, err = q.rtnTensor(t); err != nil {
				return err
			}
		}
		tensors = append(tensors, e)
	}
	counts := map[quant.Type]int{}
	for _, t := range tensors {
		counts[t.Type]++
	}
	logf("types: %v", counts)
	return format.Convert(m.WithTensors(tensors), out, format.ConvertOptions{FileType: opt.Plan.FileType(), Progress: opt.Progress})
}

// linearNames are the weight matrices of a block that calibration sees.
var linearNames = []string{"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
	"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}

type quantizer struct {
	m       *format.Model
	opt     Options
	types   map[string]quant.Type
	encoded map[string]*format.Tensor
}

// visit quantizes (GPTQ) or rescales (AWQ) one stage's linear layers.
func (q *quantizer) visit(p *cpu.Pool, s *calibrate.Stage) error {
	types := make([]quant.Type, len(s.Linear))
	for i, w := range s.Linear {
		types[i] = q.types[w.Name]
	}
	if q.opt.Method == "awq" {
		alpha, err := AWQ(p, s, types, q.opt.AWQ)
		if err != nil || q.opt.AWQ.NoClip {
			return err
		}
		clipped, err := AWQClip(p, s, types, q.opt.AWQ)
		if err == nil && q.opt.Log != nil {
			q.opt.Log("layer %d %s: alpha %.2f, %.0f%% of blocks clipped", s.Layer, s.Kind, alpha, 100*clipped)
		}
		return err
	}
	h, err := Hessian(p, s.Input)
	if err != nil {
		return err
	}
	prep, err := Prepare(h, s.Input.Cols, q.opt.GPTQ)
	if err != nil {
		return fmt.Errorf("layer %d %s: %w", s.Layer, s.Kind, err)
	}
	for i, w := range s.Linear {
		if !HasGPTQ(types[i]) {
			continue // kept wide (F16): encoded when the layer is done
		}
		data, err := GPTQ(w, prep, types[i])
		if err != nil {
			return err
		}
		q.encoded[w.Name] = q.tensor(w.Name, types[i], data)
	}
	return nil
}

// layerDone encodes what is left of a finished layer: its norms (AWQ may have changed
// them), its AWQ-scaled matrices, the matrices GPTQ left wide.
func (q *quantizer) layerDone(ly *calibrate.Layer) error {
	for _, d := range []*calibrate.Dense{ly.AttnNorm, ly.FFNNorm, ly.Q, ly.K, ly.V, ly.O, ly.QBias, ly.KBias, ly.VBias, ly.Gate, ly.Up, ly.Down} {
		if d == nil {
			continue
		}
		if _, done := q.encoded[d.Name]; done {
			continue
		}
		data, err := q.encode(d.Name, q.types[d.Name], d.Data, d.Cols)
		if err != nil {
			return err
		}
		q.encoded[d.Name] = q.tensor(d.Name, q.types[d.Name], data)
	}
	return nil
}

// tensor is the encoded tensor name, shaped as in the source model.
func (q *quantizer) tensor(name string, t quant.Type, data []byte) *format.Tensor {
	src, _ := q.m.Tensor(name)
	return &format.Tensor{Name: name, Type: t, Shape: src.Shape, Data: data}
}

// rtnTensor rounds a source tensor to its planned type (kept as it is when it is already
// of that type).
func (q *quantizer) rtnTensor(t *format.Tensor) (*format.Tensor, error) {
	to := q.types[t.Name]
	if t.Type == to {
		return t, nil
	}
	vals := make([]float32, t.Elements())
	if err := quant.Dequantize(t.Type, t.Data, vals); err != nil {
		return nil, fmt.Errorf("quantize: tensor %q: %w", t.Name, err)
	}
	_, cols := t.Rows()
	data, err := q.encode(t.Name, to, vals, cols)
	if err != nil {
		return nil, err
	}
	return &format.Tensor{Name: t.Name, Type: to, Shape: t.Shape, Data: data}, nil
}

// encode encodes rows of cols values in type t, weighed by the importance matrix's entry
// for name when there is one of the right width.
func (q *quantizer) encode(name string, t quant.Type, vals []float32, cols int) ([]byte, error) {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("quantize: tensor %q: %w", name, err)
	}
	rows := len(vals) / cols
	out := make([]byte, rows*rb)
	imp := q.opt.Importance[name]
	if imp == nil || len(imp) != cols || !isBlockType(t) {
		if err := quant.Quantize(t, vals, out); err != nil {
			return nil, fmt.Errorf("quantize: tensor %q: %w", name, err)
		}
		return out, nil
	}
	for r := range rows {
		if err := quant.QuantizeWeighted(t, vals[r*cols:(r+1)*cols], imp, out[r*rb:(r+1)*rb]); err != nil {
			return nil, fmt.Errorf("quantize: tensor %q: %w", name, err)
		}
	}
	return out, nil
}
