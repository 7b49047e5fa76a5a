package quantize

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/perplexity"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// DampGrid lists the dampings ChooseDamp picks from, as fractions of the Hessian's mean
// diagonal: half-decade steps below and above the GPTQ paper's 0.01.
var DampGrid = []float64{0.001, 0.003, 0.01, 0.03}

// heldOutEvery is the share of the calibration windows ChooseDamp holds out: every
// heldOutEvery-th window (the last of each run of that many).
const heldOutEvery = 4

// SplitWindows returns the calibration windows ChooseDamp fits on and those it holds out:
// every fourth window (with fewer than four, the last) is held out.
func SplitWindows(windows [][]int32) (fit, held [][]int32, err error) {
	if len(windows) < 2 {
		return nil, nil, fmt.Errorf("gptq: choosing the damping needs at least 2 calibration windows, there is %d: more calibration text (or --calib-tokens) or a fixed --damp", len(windows))
	}
	for i, w := range windows {
		if i%heldOutEvery == heldOutEvery-1 || (len(windows) < heldOutEvery && i == len(windows)-1) {
			held = append(held, w)
		} else {
			fit = append(fit, w)
		}
	}
	return fit, held, nil
}

// ChooseDamp picks GPTQ's damping on the calibration windows alone: for each damping of
// DampGrid the model is quantized by GPTQ onto the planned types with Hessians of the
// fit windows only (SplitWindows), and its perplexity is measured on the held-out
// windows (every token after the first scored); the damping of the least held-out
// perplexity is returned, with the perplexities, one per damping; logf (if set) is told
// each. Nothing is written.
func ChooseDamp(m *format.Model, p *cpu.Pool, windows [][]int32, types map[string]quant.Type, opt GPTQOptions, logf func(format string, args ...any)) (float64, []float64, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	start := time.Now()
	fit, held, err := SplitWindows(windows)
	if err != nil {
		return 0, nil, err
	}
	seqs := append(append([][]int32(nil), fit...), held...)
	seqLen := len(seqs[0])
	fitRows := len(fit) * seqLen
	ppl := make([]float64, len(DampGrid))
	best := -1
	for k, damp := range DampGrid {
		o := opt
		o.Damp, o.AutoDamp = damp, false
		visit := func(s *calibrate.Stage) error {
			fitIn := &calibrate.Dense{Rows: fitRows, Cols: s.Input.Cols, Data: s.Input.Data[:fitRows*s.Input.Cols]}
			h, err := Hessian(p, fitIn)
			if err != nil {
				return err
			}
			prep, err := Prepare(h, fitIn.Cols, o)
			if err != nil {
				return fmt.Errorf("layer %d %s: %w", s.Layer, s.Kind, err)
			}
			for _, w := range s.Linear {
				if t := types[w.Name]; HasGPTQ(t) {
					if _, err := GPTQ(w, prep, t); err != nil {
						return err
					}
				}
			}
			return nil
		}
		x, err := calibrate.Run(m, seqs, p, func(l int) (*calibrate.Layer, error) { return calibrate.LoadLayer(m, l) },
			visit, func(int, *calibrate.Layer) error { return nil })
		if errors.Is(err, errIndefinite) {
			ppl[k] = math.Inf(1) // too little damping for the fit windows' Hessians
			continue
		}
		if err != nil {
			return 0, nil, fmt.Errorf("gptq: choosing the damping (%g): %w", damp, err)
		}
		if ppl[k], err = heldOutPerplexity(m, p, x[fitRows*m.Config.Dim:], held, types); err != nil {
			return 0, nil, err
		}
		logf("damp %g: held-out perplexity %.4f (%d of %d windows; %.1f s)", damp, ppl[k], len(held), len(windows), time.Since(start).Seconds())
		if best < 0 || ppl[k] < ppl[best] {
			best = k
		}
	}
	if best < 0 {
		return 0, nil, fmt.Errorf("gptq: choosing the damping: the fit windows' Hessians are not positive definite at any damping of %v: more calibration text", DampGrid)
	}
	return DampGrid[best], ppl, nil
}

// heldOutPerplexity is the perplexity of the windows held, whose residual streams after
// the last block are x, with the output norm and projection rounded to their planned
// types: every token after a window's first is scored.
func heldOutPerplexity(m *format.Model, p *cpu.Pool, x []float32, held [][]int32, types map[string]quant.Type) (float64, error) {
	c := m.Config
	norm, err := calibrate.Load(m, "output_norm.weight")
	if err != nil {
		return 0, err
	}
	outName := "output.weight"
	if _, ok := m.Tensor(outName); !ok {
		outName = "token_embd.weight"
	}
	out, err := calibrate.Load(m, outName)
	if err != nil {
		return 0, err
	}
	if t := types[outName]; isBlockType(t) {
		if err := quantDequant(t, out.Data); err != nil {
			return 0, err
		}
	}
	seqLen := len(held[0])
	xn := make([]float32, seqLen*c.Dim)
	logits := make([]float32, seqLen*out.Rows)
	logp := make([]float64, out.Rows)
	var nll float64
	var n int
	for i, w := range held {
		if err := cpu.RMSNorm(p, xn, x[i*seqLen*c.Dim:(i+1)*seqLen*c.Dim], norm.Data, seqLen, float32(c.NormEps)); err != nil {
			return 0, err
		}
		if err := calibrate.MatMul(p, logits, out, xn, seqLen); err != nil {
			return 0, err
		}
		for t := 0; t+1 < seqLen; t++ {
			perplexity.LogSoftmax(logits[t*out.Rows:(t+1)*out.Rows], logp)
			nll -= logp[w[t+1]]
			n++
		}
	}
	return math.Exp(nll / float64(n)), nil
}
