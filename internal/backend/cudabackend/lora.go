package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

var (
	_ backend.LoRAOps      = (*Backend)(nil)
	_ backend.LoRAGroupOps = (*Backend)(nil)
)

// WriteRows copies data into rows row.. of t once the work queued so far is done (an
// adapter paged into its slot while the previous step may still read the slot).
func (b *Backend) WriteRows(t backend.Tensor, row int, data []float32) error {
	d, err := devTensor("write rows", "t", t, cuda.F32)
	if err != nil {
		return err
	}
	cols := d.cols()
	if row < 0 || len(data)%cols != 0 || row+len(data)/cols > d.rows() {
		return fmt.Errorf("cuda write rows: %d values at row %d of %v", len(data), row, d.shape)
	}
	dst, err := d.buf.Slice(row*cols, row*cols+len(data))
	if err != nil {
		return err
	}
	if err := b.dev.Sync(); err != nil {
		return err
	}
	return cuda.Upload(b.dev, dst, data)
}

// LoRAMatMul adds each token's adapter update to out (a group of one projection).
func (b *Backend) LoRAMatMul(out, x, u, a, bm backend.Tensor, st backend.Step) error {
	return b.LoRAMatMulGroup([]backend.Tensor{out}, x, u, []backend.Tensor{a}, []backend.Tensor{bm}, st)
}

// LoRAGroupMax returns cuda.LoRAMaxGroup.
func (b *Backend) LoRAGroupMax() int { return cuda.LoRAMaxGroup }

// LoRAMatMulGroup adds each token's adapter updates to the outputs of projections that take
// the same input x, each product in one launch for the whole group (cuda.Ops.LoRAGroup),
// over the step's tokens grouped by slot when the step was made (the slots were checked
// there), with u ([tokens][len(outs) * max rank]) holding the products A·x.
func (b *Backend) LoRAMatMulGroup(outs []backend.Tensor, x, u backend.Tensor, as, bs []backend.Tensor, st backend.Step) error {
	s, err := b.stepOf("lora", st)
	if err != nil {
		return err
	}
	if s.meta.LoRASlots == nil {
		return nil
	}
	if len(outs) != len(as) || len(outs) != len(bs) {
		return fmt.Errorf("cuda lora: %d outputs, %d A and %d B matrices", len(outs), len(as), len(bs))
	}
	xs, err := devTensor("lora", "x", x, cuda.F32)
	if err != nil {
		return err
	}
	n, nSlots := len(s.meta.LoRASlots), len(s.meta.LoRARanks)
	if nSlots == 0 || len(as) == 0 {
		return fmt.Errorf("cuda lora: %d slots and %d projections", nSlots, len(as))
	}
	ms := make([]cuda.LoRAMember, len(outs))
	maxRank := 0
	for g := range outs {
		o, err := devTensor("lora", "out", outs[g], cuda.F32)
		if err != nil {
			return err
		}
		a, err := devTensor("lora", "a", as[g], cuda.F32)
		if err != nil {
			return err
		}
		bm, err := devTensor("lora", "b", bs[g], cuda.F32)
		if err != nil {
			return err
		}
		if g == 0 {
			maxRank = a.rows() / nSlots
		}
		if o.rows() != n || a.cols() != xs.cols() || bm.cols() != o.cols() || a.rows() != nSlots*maxRank || bm.rows() != nSlots*maxRank || maxRank == 0 {
			return fmt.Errorf("cuda lora: projection %d: out %v, x %v, a %v, b %v for %d tokens and %d slots", g, o.shape, xs.shape, a.shape, bm.shape, n, nSlots)
		}
		ms[g] = cuda.LoRAMember{Out: o.buf, A: a.buf, B: bm.buf, OutDim: o.cols()}
	}
	if xs.rows() != n {
		return fmt.Errorf("cuda lora: x %v for %d tokens", xs.shape, n)
	}
	for i, r := range s.meta.LoRARanks {
		if r < 0 || int(r) > maxRank {
			return fmt.Errorf("cuda lora: slot %d of rank %d, the bound is %d", i, r, maxRank)
		}
	}
	us, err := devTensor("lora", "u", u, cuda.F32)
	if err != nil {
		return err
	}
	if us.rows() < n {
		return fmt.Errorf("cuda lora: scratch u %v for %d tokens", us.shape, n)
	}
	return b.ops.LoRAGroup(ms, xs.buf, us.buf, s.loraSlots, s.loraRanks, s.loraOrder, s.loraTiles, n, xs.cols(), maxRank, nSlots, us.cols())
}
