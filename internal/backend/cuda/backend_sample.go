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
	xs, err := devTensor("logits sample", "x", x, F32)
	if err != nil {
		return err
	}
	wm, err := devTensor("logits sample", "w", w, F32, F16, BF16)
	if err != nil {
		return err
	}
	n, vocab := xs.rows(), wm.rows()
	if len(wm.shape) != 2 || xs.cols() != wm.cols() || len(dst) != n || len(rows) != n {
		return fmt.Errorf("cuda logits sample: %d ids and %d rows of settings for x %v · w %vᵀ", len(dst), len(rows), xs.shape, wm.shape)
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
	if b.logitsDev.Len < n*vocab || b.idsDev.Len < n || b.sampleDev.Len < 4*n {
		if err := b.dev.Sync(); err != nil {
			return err
		}
		if err := firstErr(b.free(b.logitsDev), b.free(b.idsDev), b.free(b.sampleDev)); err != nil {
			return err
		}
		b.logitsDev, b.idsDev, b.sampleDev = Buffer{}, Buffer{}, Buffer{}
		if b.logitsDev, err = b.alloc(F32, n*vocab); err != nil {
			return fmt.Errorf("cuda logits sample: %w", err)
		}
		if b.idsDev, err = b.alloc(I32, max(n, 256)); err != nil {
			return fmt.Errorf("cuda logits sample: %w", err)
		}
		if b.sampleDev, err = b.alloc(F32, 4*max(n, 256)); err != nil {
			return fmt.Errorf("cuda logits sample: %w", err)
		}
	}
	settings := Buffer{Ptr: b.sampleDev.Ptr, DType: F32, Len: 4 * n}
	// The previous step's read-back synchronised the stream, so no queued kernel still
	// reads the settings buffer; the copy happens before the sampling kernel is queued.
	if err := Upload(b.dev, settings, packed); err != nil {
		return err
	}
	part := func(i int, t DType) Buffer { return Buffer{Ptr: settings.Ptr + uint64(4*i*n), DType: t, Len: n} }
	y := Buffer{Ptr: b.logitsDev.Ptr, DType: F32, Len: n * vocab}
	ids := Buffer{Ptr: b.idsDev.Ptr, DType: I32, Len: n}
	if err := b.matMul(y, xs.buf, wm, n); err != nil {
		return err
	}
	p := SampleParams{Temperature: part(0, F32), TopK: part(1, I32), TopP: part(2, F32), Uniform: part(3, F32)}
	if err := b.ops.Sample(ids, y, n, vocab, p); err != nil {
		return err
	}
	return Download(b.dev, dst, ids)
}

var _ backend.LogitsSampler = (*Backend)(nil)
