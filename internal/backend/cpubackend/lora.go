package cpubackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// WriteRows copies data into rows row.. of t.
func (b *Backend) WriteRows(t backend.Tensor, row int, data []float32) error {
	c, err := activation("write rows", "t", t)
	if err != nil {
		return err
	}
	cols := c.cols()
	if row < 0 || len(data)%cols != 0 || row+len(data)/cols > c.rows() {
		return fmt.Errorf("cpu write rows: %d values at row %d of %v", len(data), row, c.shape)
	}
	copy(c.f32[row*cols:], data)
	return nil
}

// LoRAMatMul adds each token's adapter update to out (cpu.LoRAMatMul).
func (b *Backend) LoRAMatMul(out, x, u, a, bm backend.Tensor, st backend.Step) error {
	s, err := stepOf("lora", st)
	if err != nil {
		return err
	}
	slots := s.meta.LoRASlots
	if slots == nil {
		return nil
	}
	ts := make([]*tensor, 5)
	for i, t := range []backend.Tensor{out, x, u, a, bm} {
		if ts[i], err = activation("lora", []string{"out", "x", "u", "a", "b"}[i], t); err != nil {
			return err
		}
	}
	o, xs, us, as, bs := ts[0], ts[1], ts[2], ts[3], ts[4]
	n, maxRank := len(slots), us.cols()
	if o.rows() != n || xs.rows() != n || us.rows() < n || bs.cols() != o.cols() || as.cols() != xs.cols() {
		return fmt.Errorf("cpu lora: out %v, x %v, u %v, a %v, b %v for %d tokens", o.shape, xs.shape, us.shape, as.shape, bs.shape, n)
	}
	return cpu.LoRAMatMul(b.pool, &cpu.LoRA{Out: o.f32, X: xs.f32, U: us.f32, A: as.f32, B: bs.f32,
		Tokens: n, In: xs.cols(), OutDim: o.cols(), MaxRank: maxRank, Slots: slots, Ranks: s.meta.LoRARanks})
}
