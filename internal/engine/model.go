package engine

import (
	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// MaskFunc returns the vocabulary masks of a step's logits rows (one entry per row, nil
// for an unmasked row; nil for none at all). The model calls it once, after the step's
// layers are queued and before its logits are sampled, so that the engine computes the
// masks while a device runs the layers.
type MaskFunc = model.MaskFunc

// Model is the engine's view of a model bound to its paged KV cache: the forward pass of
// one step in three forms, and the cache's block copies. The engine calls it from one
// goroutine at a time (the forward goroutine under asynchronous scheduling). Tests run
// the engine on a fake.
type Model interface {
	// Forward writes the keys and values of b's tokens into the cache at their slots,
	// attends each sequence over its context, and returns the logits of the rows of
	// b.LogitsIndices, one vocabulary-sized row each.
	Forward(b *model.Batch) ([]float32, error)
	// ForwardGreedy is Forward returning, instead of logits, each row's greedy token: the
	// largest logit among the tokens its mask allows (the lowest id on ties).
	ForwardGreedy(b *model.Batch, masks MaskFunc) ([]int32, error)
	// ForwardSample is Forward returning each row's token drawn on the device as rows
	// say, among the tokens its mask allows. Only when CanSample.
	ForwardSample(b *model.Batch, rows []backend.SampleRow, masks MaskFunc) ([]int32, error)
	// CanSample reports whether ForwardSample is available.
	CanSample() bool
	// CopyBlocks copies blocks' keys and values in every layer, in order (copy-on-write).
	CopyBlocks(copies []backend.BlockCopy) error
	// ShiftKeys rotates the keys held in blocks, every layer, by delta positions (a KV
	// policy moving keys to their new place in the cache after a drop).
	ShiftKeys(blocks []int32, delta int) error
	// ReadKV returns the keys and values of blocks, whole, for CompactKeys.
	ReadKV(blocks []int32) ([]byte, error)
	// CompactKeys writes to dst the slots keep (ascending, over the blocks buf holds, as
	// ReadKV returned them) closed up, one list for every layer and KV head or one per
	// lane (MassLanes): each lane's slot keep[i] to its slot i, its key rotated by
	// i-keep[i] positions (a KV policy evicting single tokens).
	CompactKeys(buf []byte, keep [][]int, dst []int32) error
}

// ModelInfo is what the engine needs to know of a model besides running it.
type ModelInfo struct {
	// VocabSize is the number of token ids (the length of a logits row).
	VocabSize int
	// ContextLen is the longest sequence the model takes (0: no limit of its own).
	ContextLen int
	// MassLanes is the rows of attention mass its steps report per sequence, one per
	// layer and KV head (model.Seq.Mass), which the KV policies h2o and snapkv need; 0
	// when they report none. MassHeads is the KV heads of a layer: the lanes of one.
	MassLanes, MassHeads int
}

// pagedModel binds a model.Model to one KV cache: the Model the engine runs on a real
// model.
type pagedModel struct {
	m  *model.Model
	kv *model.KVCache
}

func (p *pagedModel) Forward(b *model.Batch) ([]float32, error) { return p.m.Forward(b, p.kv) }

func (p *pagedModel) ForwardGreedy(b *model.Batch, masks MaskFunc) ([]int32, error) {
	return p.m.ForwardGreedy(b, p.kv, masks)
}

func (p *pagedModel) ForwardSample(b *model.Batch, rows []backend.SampleRow, masks MaskFunc) ([]int32, error) {
	return p.m.ForwardSample(b, p.kv, rows, masks)
}

func (p *pagedModel) CanSample() bool { return p.m.CanSample() }

func (p *pagedModel) CopyBlocks(copies []backend.BlockCopy) error { return p.kv.CopyBlocks(copies) }

func (p *pagedModel) ShiftKeys(blocks []int32, delta int) error { return p.kv.ShiftKeys(blocks, delta) }

func (p *pagedModel) ReadKV(blocks []int32) ([]byte, error) {
	buf := make([]byte, len(blocks)*p.kv.BlockBytes())
	if err := p.kv.ReadBlocks(blocks, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func (p *pagedModel) CompactKeys(buf []byte, keep [][]int, dst []int32) error {
	return p.kv.CompactKeys(buf, keep, dst)
}
