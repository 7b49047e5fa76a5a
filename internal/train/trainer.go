package train

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// Data is a training set: windows of Ctx+1 tokens (a window's first Ctx tokens are the
// input, its last Ctx the targets) and, for distillation, the teacher's top-k logits at
// each input position: row w*Ctx + t for window w, position t.
type Data struct {
	Windows [][]int32
	Teacher *TopK // nil when training on hard labels only
}

// Hash identifies the data's tokens, so that a checkpoint is resumed only on the same data.
func (d Data) Hash() uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, w := range d.Windows {
		for _, t := range w {
			binary.LittleEndian.PutUint32(b[:], uint32(t))
			h.Write(b[:])
		}
	}
	return h.Sum64()
}

// Options controls a training run.
type Options struct {
	Batch int         `json:"batch"` // windows per step
	Loss  LossOptions `json:"loss"`
	Opt   AdamW       `json:"adamw"`
	Seed  uint64      `json:"seed"` // picks each step's windows
}

// Trainer trains a model step by step. Each step's windows are drawn from a generator
// seeded by (Seed, step), so a run resumed from a checkpoint takes the same steps as one
// that was never interrupted.
type Trainer struct {
	Model *Model
	Step  int // steps done
	opt   Options
	data  Data
	grad  *Model
	state *adamState
	pool  *cpu.Pool
}

// StepStats reports one step: mean losses per position, the gradient norm before
// clipping, the learning rate and the tokens trained on.
type StepStats struct {
	Loss, CE, KL float64
	GradNorm, LR float64
	Tokens       int
}

// NewTrainer returns a trainer of m on data, running its parallel loops on pool.
func NewTrainer(m *Model, data Data, opt Options, pool *cpu.Pool) (*Trainer, error) {
	c := m.Config
	switch {
	case len(data.Windows) == 0:
		return nil, fmt.Errorf("train: no training windows")
	case opt.Batch <= 0:
		return nil, fmt.Errorf("train: batch %d: want at least 1", opt.Batch)
	case opt.Loss.Alpha < 0 || opt.Loss.Alpha > 1:
		return nil, fmt.Errorf("train: alpha %g: want 0..1", opt.Loss.Alpha)
	case opt.Loss.Alpha < 1 && data.Teacher == nil:
		return nil, fmt.Errorf("train: distillation (alpha < 1) needs the teacher's logits")
	case opt.Loss.Alpha < 1 && opt.Loss.Temperature <= 0:
		return nil, fmt.Errorf("train: temperature %g: want > 0", opt.Loss.Temperature)
	case opt.Opt.Steps <= 0 || opt.Opt.LR <= 0:
		return nil, fmt.Errorf("train: want positive steps and learning rate")
	}
	for i, w := range data.Windows {
		if len(w) != c.Ctx+1 {
			return nil, fmt.Errorf("train: window %d has %d tokens, want ctx+1 = %d", i, len(w), c.Ctx+1)
		}
		for _, t := range w {
			if t < 0 || int(t) >= c.Vocab {
				return nil, fmt.Errorf("train: window %d: token %d outside the vocabulary of %d", i, t, c.Vocab)
			}
		}
	}
	if t := data.Teacher; t != nil {
		if t.K <= 0 || len(t.IDs) != len(data.Windows)*c.Ctx*t.K || len(t.Logits) != len(t.IDs) {
			return nil, fmt.Errorf("train: teacher top-k holds %d entries, want %d windows x %d positions x k=%d", len(t.IDs), len(data.Windows), c.Ctx, t.K)
		}
		for _, id := range t.IDs {
			if id < 0 || int(id) >= c.Vocab {
				return nil, fmt.Errorf("train: teacher token %d outside the vocabulary of %d", id, c.Vocab)
			}
		}
	}
	return &Trainer{Model: m, opt: opt, data: data, grad: m.zeroLike(), state: newAdamState(m.Params()), pool: pool}, nil
}

// batch returns the window indices of step.
func (t *Trainer) batch(step int) []int {
	rng := rand.New(rand.NewPCG(t.opt.Seed, uint64(step)))
	idx := make([]int, t.opt.Batch)
	for i := range idx {
		idx[i] = rng.IntN(len(t.data.Windows))
	}
	return idx
}

// TrainStep runs one step: forward, loss, backward, AdamW update.
func (t *Trainer) TrainStep() StepStats {
	c := t.Model.Config
	T := c.Ctx
	idx := t.batch(t.Step)
	n := len(idx) * T
	inputs, targets := make([]int32, 0, n), make([]int32, 0, n)
	rows := make([]int, 0, n)
	for _, w := range idx {
		win := t.data.Windows[w]
		inputs = append(inputs, win[:T]...)
		targets = append(targets, win[1:]...)
		for p := range T {
			rows = append(rows, w*T+p)
		}
	}
	tp := t.Model.forward(t.pool, inputs, len(idx), T)
	dlogits := make([]float32, len(tp.logits))
	st := loss(t.pool, dlogits, tp.logits, c.Vocab, targets, t.data.Teacher, rows, t.opt.Loss)
	gs := t.grad.Params()
	for _, g := range gs {
		clear(g.W)
	}
	t.Model.backward(t.pool, tp, dlogits, t.grad)
	norm, lr := t.opt.Opt.update(t.Model.Params(), gs, t.state, t.Step)
	t.Step++
	k := float64(st.n)
	return StepStats{Loss: st.loss / k, CE: st.ce / k, KL: st.kl / k, GradNorm: norm, LR: lr, Tokens: n}
}
