package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

var _ backend.LoRAOps = (*Backend)(nil)

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

// LoRAMatMul adds each token's adapter update to out (cuda.Ops.LoRA).
func (b *Backend) LoRAMatMul(out, x, u, a, bm backend.Tensor, st backend.Step) error {
	s, err := b.stepOf("lora", st)
	if err != nil {
		return err
	}
	if s.meta.LoRASlots == nil {
		return nil
	}
	ts := make([]*tensor, 5)
	for i, t := range []backend.Tensor{out, x, u, a, bm} {
		if ts[i], err = devTensor("lora", []string{"out", "x", "u", "a", "b"}[i], t, cuda.F32); err != nil {
			return err
		}
	}
	o, xs, us, as, bs := ts[0], ts[1], ts[2], ts[3], ts[4]
	n, maxRank, nSlots := len(s.meta.LoRASlots), us.cols(), len(s.meta.LoRARanks)
	if o.rows() != n || xs.rows() != n || bs.cols() != o.cols() || as.cols() != xs.cols() || as.rows() != nSlots*maxRank || bs.rows() != nSlots*maxRank {
		return fmt.Errorf("cuda lora: out %v, x %v, u %v, a %v, b %v for %d tokens and %d slots", o.shape, xs.shape, us.shape, as.shape, bs.shape, n, nSlots)
	}
	for t, slot := range s.meta.LoRASlots {
		if int(slot) >= nSlots {
			return fmt.Errorf("cuda lora: token %d: slot %d outside %d", t, slot, nSlots)
		}
	}
	for i, r := range s.meta.LoRARanks {
		if r < 0 || int(r) > maxRank {
			return fmt.Errorf("cuda lora: slot %d of rank %d, the bound is %d", i, r, maxRank)
		}
	}
	return b.ops.LoRA(o.buf, xs.buf, us.buf, as.buf, bs.buf, s.loraSlots, s.loraRanks, n, xs.cols(), o.cols(), maxRank, nSlots)
}
