package cuda

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// LogitsSample multiplies x by wᵀ on the device, draws each row's token there as rows
// says (temperature, top-k, top-p, and the row's uniform draw; see backend.SampleRow) and
// copies only the token ids into dst.
func (b *Backend) LogitsSample(dst []int32, x, w backend.Tensor, rows []backend.SampleRow) error {
	n := len(dst)
	if len(rows) != n {
		return fmt.Errorf("cuda logits sample: %d ids and %d rows of settings", n, len(rows))
	}
	// The four settings of every row, packed into one upload: temperatures, top-k (int32
	// bits), top-p, uniforms.
	packed := make([]float32, 4*n)
	for i, r := range rows {
		if !(r.Temperature > 0) || !(r.Uniform >= 0 && r.Uniform < 1) {
			return fmt.Errorf("cuda logits sample: row %d: temperature %g, uniform %g: want a positive temperature and a draw in [0, 1)", i, r.Temperature, r.Uniform)
		}
		packed[i], packed[n+i], packed[2*n+i], packed[3*n+i] = r.Temperature, math.Float32frombits(uint32(r.TopK)), r.TopP, r.Uniform
	}
	y, ids, vocab, err := b.deviceLogits("logits sample", x, w, n, 4)
	if err != nil {
		return err
	}
	// The previous step's read-back synchronised the stream, so no queued kernel still
	// reads the settings buffer; the copy happens before the sampling kernel is queued.
	settings := Buffer{Ptr: b.sampleDev.Ptr, DType: F32, Len: 4 * n}
	if err := Upload(b.dev, settings, packed); err != nil {
		return err
	}
	part := func(i int, t DType) Buffer { return Buffer{Ptr: settings.Ptr + uint64(4*i*n), DType: t, Len: n} }
	p := SampleParams{Temperature: part(0, F32), TopK: part(1, I32), TopP: part(2, F32), Uniform: part(3, F32)}
	if err := b.ops.Sample(ids, y, n, vocab, p); err != nil {
		return err
	}
	return Download(b.dev, dst, ids)
}

var _ backend.LogitsSampler = (*Backend)(nil)
