package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// AttentionMass adds the attention probabilities of the sequences that ask to their mass
// (see backend.AttentionMasser): the kernel accumulates each sequence's on the device, per
// KV head, one layer at a time, and the sum comes back to the host (a synchronization per layer and
// sequence asking, which only the KV policies h2o and snapkv pay).
func (b *Backend) AttentionMass(mass [][]float32, from []int, q backend.Tensor, kv backend.KVCache, layer int, scale float32, st backend.Step) error {
	qs, err := devTensor("attention mass", "q", q, cuda.F32)
	if err != nil {
		return err
	}
	c, l, err := kvOf("attention mass", kv, layer)
	if err != nil {
		return err
	}
	if l.Quantized() {
		return fmt.Errorf("cuda attention mass: a kv cache of %s elements (h2o and snapkv read f32, f16 or bf16 caches)", c.spec.DType)
	}
	s, err := b.stepOf("attention mass", st)
	if err != nil {
		return err
	}
	if b.capturing {
		return fmt.Errorf("cuda attention mass: not inside a graph capture")
	}
	m := s.meta
	if len(mass) != m.NumSeqs() || len(from) != m.NumSeqs() {
		return fmt.Errorf("cuda attention mass: %d masses and %d offsets for %d sequences", len(mass), len(from), m.NumSeqs())
	}
	if qs.rows() != m.NumTokens() || qs.cols()%l.HeadDim != 0 {
		return fmt.Errorf("cuda attention mass: q %v for %d tokens of heads of %d", qs.shape, m.NumTokens(), l.HeadDim)
	}
	qDim := qs.cols()
	for i, ms := range mass {
		if ms == nil {
			continue
		}
		q0, t1 := int(m.QueryStarts[i]), int(m.QueryStarts[i+1])
		t0, ctx := q0+from[i], int(m.ContextLens[i])
		if from[i] < 0 || t0 > t1 {
			return fmt.Errorf("cuda attention mass: sequence %d: rows from %d of %d", i, from[i], t1-q0)
		}
		if t0 == t1 {
			continue
		}
		kvh := l.KVHeads
		stride := len(ms) / kvh
		if len(ms)%kvh != 0 || stride < ctx {
			return fmt.Errorf("cuda attention mass: sequence %d: %d entries for %d kv heads of a context of %d", i, len(ms), kvh, ctx)
		}
		// On the device the rows are ctx long; the host's may be longer.
		if err := b.grow(&b.massBuf, cuda.F32, kvh*ctx, kvh*ctx, "attention mass"); err != nil {
			return err
		}
		dst := cuda.Buffer{Ptr: b.massBuf.Ptr, DType: cuda.F32, Len: kvh * ctx}
		qRows, err := qs.buf.Slice(t0*qDim, t1*qDim)
		if err != nil {
			return fmt.Errorf("cuda attention mass: %w", err)
		}
		table, err := s.blockTables.Slice(i*s.maxBlocks, (i+1)*s.maxBlocks)
		if err != nil {
			return fmt.Errorf("cuda attention mass: %w", err)
		}
		if err := b.dev.Fill32(dst, 0); err != nil {
			return err
		}
		ctx0 := ctx - (t1 - q0) + from[i]
		if err := b.ops.AttentionMass(cuda.MassArgs{Mass: dst, MassStride: ctx, Q: qRows, BlockTable: table, QStride: qDim, Tokens: t1 - t0,
			Heads: qDim / l.HeadDim, Ctx0: ctx0, Cache: l, Scale: scale}); err != nil {
			return err
		}
		host := make([]float32, kvh*ctx)
		if err := cuda.Download(b.dev, host, dst); err != nil {
			return fmt.Errorf("cuda attention mass: %w", err)
		}
		for j, x := range host {
			ms[j/ctx*stride+j%ctx] += x
		}
	}
	return nil
}
