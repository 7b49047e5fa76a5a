package prune

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// Structured pruning removes whole parts of the model, measured on calibration text:
//
//   - a layer's importance is its block influence (ShortGPT, Men et al., 2024): one minus
//     the mean cosine similarity of the residual stream entering the block and leaving it,
//     over the calibration tokens. A block that barely turns the stream changes little
//     when it is skipped. The stream's direction before block l is read from block l's
//     attention-norm output divided by the norm's weight (RMSNorm only rescales each
//     token), after the last block from the stream itself.
//   - a head's importance is the mean squared norm of its contribution to the attention
//     output projection's output, ||W_O[:, head] att_head||^2 over the calibration tokens:
//     what the block would lose without it. Heads are measured layer by layer with the
//     heads already dropped from earlier layers gone.
//
// GGUF and Hugging Face configs hold one query-head count and one key/value group size for
// all layers, so the same number of heads goes from every layer and, with grouped-query
// attention, the same number from every key/value group (each layer choosing its own).

// StructuredOptions controls Structured.
type StructuredOptions struct {
	DropLayers int // layers to remove
	DropHeads  int // query heads to remove from every layer (a multiple of the KV heads)
	// Calibration holds the token sequences (of one length) importance is measured on.
	Calibration [][]int32
	Threads     int
	Log         func(format string, args ...any)
	LayerDone   func(done, total int)
	Progress    func(done, total int64)
}

// Importance is what Structured measured.
type Importance struct {
	// LayerInfluence[l] is block l's influence (1 - mean cosine of its input and output).
	LayerInfluence []float64
	// HeadImportance[l][h] is head h of layer l's mean squared contribution (with DropHeads).
	HeadImportance [][]float64
	DroppedLayers  []int
	DroppedHeads   [][]int // per layer, ascending
}

// Structured writes m without its least important layers or heads to out (a .gguf file
// or a Hugging Face folder, temporary until complete) and returns what it measured.
func Structured(m *format.Model, out string, opt StructuredOptions) (*Importance, error) {
	c := m.Config
	if err := calibrate.Check(c); err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	switch {
	case opt.DropLayers == 0 && opt.DropHeads == 0:
		return nil, fmt.Errorf("prune: nothing to drop")
	case opt.DropLayers < 0 || opt.DropLayers >= c.Layers:
		return nil, fmt.Errorf("prune: --drop-layers %d: the model has %d layers (at least one must stay)", opt.DropLayers, c.Layers)
	case opt.DropHeads < 0 || opt.DropHeads >= c.Heads:
		return nil, fmt.Errorf("prune: --drop-heads %d: the model has %d heads per layer (at least one must stay)", opt.DropHeads, c.Heads)
	case opt.DropHeads%c.KVHeads != 0:
		return nil, fmt.Errorf("prune: --drop-heads %d: the model's %d query heads share %d key/value heads in groups of %d, and GGUF and Hugging Face configs hold one group size for every layer, so the heads dropped must be a multiple of %d (the same number from each group)",
			opt.DropHeads, c.Heads, c.KVHeads, c.Heads/c.KVHeads, c.KVHeads)
	case len(opt.Calibration) == 0:
		return nil, fmt.Errorf("prune: structured pruning measures importance on calibration text (it is empty or shorter than one window)")
	}
	if opt.DropHeads > 0 {
		for l := range c.Layers {
			for _, n := range []string{"attn_q.weight", "attn_output.weight"} {
				name := fmt.Sprintf("blk.%d.%s", l, n)
				if t, ok := m.Tensor(name); !ok || !isFloat(t.Type) {
					return nil, fmt.Errorf("prune: --drop-heads re-encodes %s: it must be F32, F16 or BF16", name)
				}
			}
		}
		if c.QKVBias {
			return nil, fmt.Errorf("prune: --drop-heads: models with q/k/v biases are not supported")
		}
	}
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := cpu.NewPool(max(opt.Threads, 1))
	defer p.Close()
	imp := &Importance{LayerInfluence: make([]float64, c.Layers)}
	if opt.DropHeads > 0 {
		imp.HeadImportance = make([][]float64, c.Layers)
		imp.DroppedHeads = make([][]int, c.Layers)
	}
	encoded := map[string]*format.Tensor{}
	var prev []float32 // the stream's direction before the current block
	visit := func(s *calibrate.Stage) error {
		switch {
		case s.Kind == calibrate.AttnInput:
			dir := unNorm(s.Input, s.Norm)
			if prev != nil {
				imp.LayerInfluence[s.Layer-1] = 1 - meanCosine(prev, dir, c.Dim)
			}
			prev = dir
		case s.Kind == calibrate.AttnOutput && opt.DropHeads > 0:
			hi := headImportance(p, s, c.Heads, c.HeadDim)
			imp.HeadImportance[s.Layer] = hi
			drop := leastHeads(hi, c.KVHeads, opt.DropHeads/c.KVHeads)
			imp.DroppedHeads[s.Layer] = drop
			o := s.Linear[0]
			for _, h := range drop { // gone for the layers after this one
				for r := range o.Rows {
					clear(o.Row(r)[h*c.HeadDim : (h+1)*c.HeadDim])
				}
			}
		}
		return nil
	}
	done := func(l int, ly *calibrate.Layer) error {
		if opt.DropHeads > 0 {
			q, o := dropHeads(ly.Q, ly.O, imp.DroppedHeads[l], c.HeadDim)
			for _, d := range []*calibrate.Dense{q, o} {
				src, _ := m.Tensor(d.Name)
				t, err := encode(d, src.Type, []int{d.Rows, d.Cols})
				if err != nil {
					return err
				}
				encoded[d.Name] = t
			}
		}
		if opt.LayerDone != nil {
			opt.LayerDone(l+1, c.Layers)
		}
		return nil
	}
	x, err := calibrate.Run(m, opt.Calibration, p,
		func(l int) (*calibrate.Layer, error) { return calibrate.LoadLayer(m, l) }, visit, done)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	imp.LayerInfluence[c.Layers-1] = 1 - meanCosine(prev, x, c.Dim)
	imp.DroppedLayers = leastLayers(imp.LayerInfluence, opt.DropLayers)

	// The smaller model: dropped layers left out, the rest renumbered.
	newIndex := make([]int, c.Layers)
	dropped := map[int]bool{}
	for _, l := range imp.DroppedLayers {
		dropped[l] = true
	}
	for l, n := 0, 0; l < c.Layers; l++ {
		newIndex[l] = -1
		if !dropped[l] {
			newIndex[l] = n
			n++
		}
	}
	var tensors []*format.Tensor
	for _, t := range m.Tensors {
		if e, ok := encoded[t.Name]; ok {
			t = e
		}
		if l, rest, ok := blockOf(t.Name); ok {
			if newIndex[l] < 0 {
				continue
			}
			r := *t
			r.Name = fmt.Sprintf("blk.%d.%s", newIndex[l], rest)
			t = &r
		}
		tensors = append(tensors, t)
	}
	small := m.WithTensors(tensors)
	small.Config.Layers -= opt.DropLayers
	small.Config.Heads -= opt.DropHeads
	return imp, Write(small, out, opt.Progress)
}

var blockName = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)

// blockOf splits "blk.L.rest" into L and rest.
func blockOf(name string) (int, string, bool) {
	mm := blockName.FindStringSubmatch(name)
	if mm == nil {
		return 0, "", false
	}
	l, err := strconv.Atoi(mm[1])
	return l, mm[2], err == nil
}

// unNorm returns the direction of the residual stream from its RMSNorm output: each
// column divided by the norm's weight (0 where the weight is 0).
func unNorm(xn, norm *calibrate.Dense) []float32 {
	out := make([]float32, len(xn.Data))
	for i, v := range xn.Data {
		if g := norm.Data[i%xn.Cols]; g != 0 {
			out[i] = v / g
		}
	}
	return out
}

// meanCosine is the mean over tokens of the cosine similarity of a's and b's rows.
func meanCosine(a, b []float32, dim int) float64 {
	n := len(a) / dim
	var sum float64
	for t := range n {
		var ab, aa, bb float64
		for j := t * dim; j < (t+1)*dim; j++ {
			ab += float64(a[j]) * float64(b[j])
			aa += float64(a[j]) * float64(a[j])
			bb += float64(b[j]) * float64(b[j])
		}
		if aa > 0 && bb > 0 {
			sum += ab / math.Sqrt(aa*bb)
		}
	}
	return sum / float64(max(n, 1))
}

// headImportance returns each head's mean squared contribution to the output projection's
// output: (1/n) sum_t ||W_O[:, h] att_h[t]||^2.
func headImportance(p *cpu.Pool, s *calibrate.Stage, heads, hd int) []float64 {
	o, att, n := s.Linear[0], s.Input, s.Tokens
	imp := make([]float64, heads)
	p.Run(heads, func(start, end int) {
		y := make([]float32, o.Rows)
		for h := start; h < end; h++ {
			var sum float64
			for t := range n {
				a := att.Row(t)[h*hd : (h+1)*hd]
				for r := range o.Rows {
					w := o.Row(r)[h*hd : (h+1)*hd]
					var d float32
					for e, v := range a {
						d += w[e] * v
					}
					y[r] = d
				}
				for _, v := range y {
					sum += float64(v) * float64(v)
				}
			}
			imp[h] = sum / float64(max(n, 1))
		}
	})
	return imp
}

// leastHeads returns the k least important heads of each key/value group (the heads of a
// group are consecutive), ascending.
func leastHeads(imp []float64, groups, k int) []int {
	size := len(imp) / groups
	var out []int
	for g := range groups {
		idx := make([]int, size)
		for i := range idx {
			idx[i] = g*size + i
		}
		sort.SliceStable(idx, func(a, b int) bool { return imp[idx[a]] < imp[idx[b]] })
		out = append(out, idx[:k]...)
	}
	sort.Ints(out)
	return out
}

// leastLayers returns the k layers of lowest influence, ascending.
func leastLayers(influence []float64, k int) []int {
	idx := make([]int, len(influence))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return influence[idx[a]] < influence[idx[b]] })
	out := append([]int(nil), idx[:k]...)
	sort.Ints(out)
	return out
}

// dropHeads returns q without the rows and o without the columns of the dropped heads.
func dropHeads(q, o *calibrate.Dense, drop []int, hd int) (*calibrate.Dense, *calibrate.Dense) {
	gone := map[int]bool{}
	for _, h := range drop {
		gone[h] = true
	}
	heads := q.Rows / hd
	keep := heads - len(drop)
	nq := &calibrate.Dense{Name: q.Name, Rows: keep * hd, Cols: q.Cols, Data: make([]float32, 0, keep*hd*q.Cols)}
	no := &calibrate.Dense{Name: o.Name, Rows: o.Rows, Cols: keep * hd, Data: make([]float32, 0, o.Rows*keep*hd)}
	for h := range heads {
		if !gone[h] {
			nq.Data = append(nq.Data, q.Data[h*hd*q.Cols:(h+1)*hd*q.Cols]...)
		}
	}
	for r := range o.Rows {
		row := o.Row(r)
		for h := range heads {
			if !gone[h] {
				no.Data = append(no.Data, row[h*hd:(h+1)*hd]...)
			}
		}
	}
	return nq, no
}
