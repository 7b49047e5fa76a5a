package cpubackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// LogitsArgmax computes the logits of x's rows into a buffer of the backend's and writes
// each row's greedy token, among those its mask allows, into dst (cpu.ArgmaxMasked: what
// sample.Greedy picks).
func (b *Backend) LogitsArgmax(dst []int32, x, w backend.Tensor, masks [][]uint32) error {
	wm, err := matrix("logits argmax", "w", w)
	if err != nil {
		return err
	}
	if err := backend.CheckMasks(masks, len(dst), wm.Rows); err != nil {
		return fmt.Errorf("cpu logits argmax: %w", err)
	}
	b.logits = grow(b.logits, len(dst)*wm.Rows)
	if err := b.Logits(b.logits, x, w); err != nil {
		return err
	}
	return cpu.ArgmaxRows(b.pool, dst, b.logits, wm.Rows, masks)
}

var _ backend.ArgmaxLogits = (*Backend)(nil)
