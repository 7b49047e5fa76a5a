package cudabackend

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// LogitsArgmax multiplies x by wᵀ on the device, picks each row's largest logit there
// among the tokens its mask allows (lowest index among ties, NaN never wins) and copies
// only the token ids into dst. The masks, when a row has one, reach the device in one copy.
func (b *Backend) LogitsArgmax(dst []int32, x, w backend.Tensor, masks [][]uint32) error {
	n := len(dst)
	vocab, err := logitsVocab("logits argmax", w)
	if err != nil {
		return err
	}
	mb, err := b.uploadMasks("logits argmax", masks, n, vocab)
	if err != nil {
		return err
	}
	y, ids, vocab, err := b.deviceLogits("logits argmax", x, w, n, 0)
	if err != nil {
		return err
	}
	if err := b.grow(&b.argmaxWork, cuda.F32, 2*cuda.ArgmaxParts*n, 2*cuda.ArgmaxParts*max(n, 256), "logits argmax"); err != nil {
		return err
	}
	if err := b.ops.Argmax(ids, y, b.argmaxWork, n, vocab, mb); err != nil {
		return err
	}
	return cuda.Download(b.dev, dst, ids)
}

// LogitsSample multiplies x by wᵀ on the device, draws each row's token there as rows
// says (temperature, top-k, top-p, vocabulary mask, and the row's uniform draw; see
// backend.SampleRow) and copies only the token ids into dst.
func (b *Backend) LogitsSample(dst []int32, x, w backend.Tensor, rows []backend.SampleRow) error {
	n := len(dst)
	if len(rows) != n {
		return fmt.Errorf("cuda logits sample: %d ids and %d rows of settings", n, len(rows))
	}
	// The four settings of every row, packed into one upload: temperatures, top-k (int32
	// bits), top-p, uniforms.
	packed := make([]float32, 4*n)
	var masks [][]uint32
	for i, r := range rows {
		if !(r.Temperature > 0) || !(r.Uniform >= 0 && r.Uniform < 1) {
			return fmt.Errorf("cuda logits sample: row %d: temperature %g, uniform %g: want a positive temperature and a draw in [0, 1)", i, r.Temperature, r.Uniform)
		}
		packed[i], packed[n+i], packed[2*n+i], packed[3*n+i] = r.Temperature, math.Float32frombits(uint32(r.TopK)), r.TopP, r.Uniform
		if r.Mask != nil {
			if masks == nil {
				masks = make([][]uint32, n)
			}
			masks[i] = r.Mask
		}
	}
	vocab, err := logitsVocab("logits sample", w)
	if err != nil {
		return err
	}
	mb, err := b.uploadMasks("logits sample", masks, n, vocab)
	if err != nil {
		return err
	}
	y, ids, vocab, err := b.deviceLogits("logits sample", x, w, n, 4)
	if err != nil {
		return err
	}
	// The previous step's read-back synchronised the stream, so no queued kernel still
	// reads the settings buffer; the copy happens before the sampling kernel is queued.
	settings := cuda.Buffer{Ptr: b.sampleDev.Ptr, DType: cuda.F32, Len: 4 * n}
	if err := cuda.Upload(b.dev, settings, packed); err != nil {
		return err
	}
	part := func(i int, t cuda.DType) cuda.Buffer {
		return cuda.Buffer{Ptr: settings.Ptr + uint64(4*i*n), DType: t, Len: n}
	}
	p := cuda.SampleParams{Temperature: part(0, cuda.F32), TopK: part(1, cuda.I32), TopP: part(2, cuda.F32), Uniform: part(3, cuda.F32), Masks: mb}
	if err := b.ops.Sample(ids, y, n, vocab, p); err != nil {
		return err
	}
	return cuda.Download(b.dev, dst, ids)
}

// logitsVocab returns the vocabulary of an output projection w (its rows).
func logitsVocab(op string, w backend.Tensor) (int, error) {
	wm, err := devWeight(op, "w", w)
	if err != nil {
		return 0, err
	}
	return wm.rows(), nil
}

// uploadMasks queues the copy of a step's vocabulary masks (nil, or one per row of n; see
// backend.CheckMasks) to the device and returns the buffer the argmax and sampling kernels
// read (cuda.PackMasks): n words giving where each row's mask starts in the same buffer
// (-1 for a row without one), then the masks of the rows that have one,
// backend.MaskWords(vocab) words each. With no mask in the step it copies nothing and
// returns the zero Buffer, which the kernels read as "no row masked".
//
// The words go through pinned memory in one asynchronous copy, queued ahead of the logits
// product, so that the kernels after it find them. The pinned buffer is rewritten without
// a wait: every step's UploadStep synchronises the stream first, so no copy out of it from
// an earlier step is still pending.
func (b *Backend) uploadMasks(op string, masks [][]uint32, n, vocab int) (cuda.Buffer, error) {
	if err := backend.CheckMasks(masks, n, vocab); err != nil {
		return cuda.Buffer{}, fmt.Errorf("cuda %s: %w", op, err)
	}
	total := cuda.MaskedLen(masks, vocab)
	if total == 0 {
		return cuda.Buffer{}, nil
	}
	if b.maskHost == nil || len(b.maskHost.Int32s()) < total {
		// A smaller pinned buffer may still be read by a queued copy.
		if err := firstErr(b.dev.Sync(), b.dev.FreeHost(b.maskHost)); err != nil {
			return cuda.Buffer{}, err
		}
		b.maskHost = nil
		h, err := b.dev.AllocHost(4 * 2 * total)
		if err != nil {
			return cuda.Buffer{}, fmt.Errorf("cuda %s: masks: %w", op, err)
		}
		b.maskHost = h
	}
	if err := b.grow(&b.maskDev, cuda.I32, total, 2*total, op); err != nil {
		return cuda.Buffer{}, err
	}
	cuda.PackMasks(b.maskHost.Int32s(), masks)
	buf, err := b.maskDev.Slice(0, total)
	if err != nil {
		return cuda.Buffer{}, err
	}
	if err := b.dev.UploadAsync(buf, b.maskHost, 0); err != nil {
		return cuda.Buffer{}, fmt.Errorf("cuda %s: masks: %w", op, err)
	}
	return buf, nil
}

// deviceLogits queues x · wᵀ for an op (named in errors) that picks the n rows' tokens on
// the device: it checks that x has n rows, grows the step's logits and token-id buffers,
// and the sampling-settings buffer to settings float32s per row, to hold them, and returns
// the logits (n rows of vocab) and the ids buffer (n rows).
func (b *Backend) deviceLogits(op string, x, w backend.Tensor, n, settings int) (y, ids cuda.Buffer, vocab int, err error) {
	xs, err := devTensor(op, "x", x, cuda.F32)
	if err != nil {
		return y, ids, 0, err
	}
	wm, err := devWeight(op, "w", w)
	if err != nil {
		return y, ids, 0, err
	}
	vocab = wm.rows()
	if len(wm.shape) != 2 || xs.cols() != wm.cols() || xs.rows() != n {
		return y, ids, 0, fmt.Errorf("cuda %s: %d ids for x %v · w %vᵀ", op, n, xs.shape, wm.shape)
	}
	if err := firstErr(b.grow(&b.logitsDev, cuda.F32, n*vocab, n*vocab, op), b.grow(&b.idsDev, cuda.I32, n, max(n, 256), op),
		b.grow(&b.sampleDev, cuda.F32, settings*n, settings*max(n, 256), op)); err != nil {
		return y, ids, 0, err
	}
	y = cuda.Buffer{Ptr: b.logitsDev.Ptr, DType: cuda.F32, Len: n * vocab}
	ids = cuda.Buffer{Ptr: b.idsDev.Ptr, DType: cuda.I32, Len: n}
	return y, ids, vocab, b.matMul(y, xs.buf, wm, n)
}

var (
	_ backend.ArgmaxLogits  = (*Backend)(nil)
	_ backend.LogitsSampler = (*Backend)(nil)
)
