package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/lora"
)

// Batch is the input of one forward step: the tokens of one or more sequences, concatenated
// sequence after sequence, with where each token sits and where its keys and values go.
//
// A sequence's tokens in a step are the last QueryLen of its context of ContextLen: the
// i-th sits at index ContextLen-QueryLen+i of the context and attends to the context's
// entries 0 to that index. Its position, which RoPE rotates by, is its own: usually its
// context index, but any value >= 0 (a sparsified cache keeps fewer entries than the
// positions it has seen).
type Batch struct {
	// Tokens and Positions have one entry per token in the step.
	Tokens, Positions []int32
	// SlotMapping gives the KV cache slot (block*BlockSize + offset) each token's keys and
	// values are written to.
	SlotMapping []int32
	// Seqs describes each sequence of the step; their token ranges tile Tokens in order.
	Seqs []Seq
	// LogitsIndices lists the token rows whose logits Forward returns, in this order
	// (usually each sequence's last token).
	LogitsIndices []int
	// AfterLayer, when set, is called by the forward pass after each layer has written the
	// step's keys and values, before the next layer computes, with where that layer's part
	// lies in a block and a reader of it: a prefill instance sends a layer's KV while the
	// next layer computes. On a model not split by tensor the piece is the whole layer; on
	// one split by tensor each rank of the layer's stage calls it for its own KV heads'
	// piece of the layer (KVCache.LayerPieces), from the rank's goroutine, so calls may
	// come at once from several goroutines. With a step split into pipeline micro-batches,
	// a rank calls it during the last one, once the layer holds every micro-batch's keys
	// and values. It is called only when Model.StreamsLayers, never otherwise; an error it
	// returns fails the step.
	AfterLayer LayerHook
}

// LayerHook is Batch.AfterLayer: called after piece's layer has written its keys and
// values on piece's rank, with read, which copies that piece of blocks out of the cache
// (valid during the call).
type LayerHook func(piece LayerPiece, read LayerReader) error

// LayerPiece is one rank's part of one layer in the host layout of KVCache.ReadBlocks:
// bytes [Offset, Offset+Bytes) of every block. The pieces of KVCache.LayerPieces tile a
// block; on a model not split by tensor, layer l's piece is the whole layer, at offset
// l x LayerBlockBytes.
type LayerPiece struct {
	// Layer is the model-wide index of the layer, Rank the rank that holds the piece.
	Layer, Rank int
	// Offset and Bytes place the piece in each block's bytes.
	Offset, Bytes int
}

// LayerReader queues a copy of one layer piece's keys and values of blocks into dst, in the
// host layout of that piece of KVCache.ReadBlocks (block after block, LayerPiece.Bytes
// each: the rank's keys then values of the layer, or keys alone in an MLA model's cache),
// without holding up the step's next layers, and returns a wait that returns once dst
// holds it (at once on the CPU; on a GPU once the copy, on a stream of its own, is done).
// Every wait of a step must have returned before the next step runs.
type LayerReader func(blocks []int32, dst []byte) (wait func() error, err error)

// Seq is one sequence's part of a Batch.
type Seq struct {
	// BlockTable maps the sequence's logical blocks to physical blocks of the KV cache.
	BlockTable []int32
	// QueryStart and QueryLen locate the sequence's tokens in the Batch.
	QueryStart, QueryLen int
	// ContextLen is the number of the sequence's tokens in the cache after this step
	// (cached prefix + the step's tokens).
	ContextLen int
	// Mass, when set, receives the attention mass of the sequence's tokens from its
	// MassFrom-th on (added to it), per layer and KV head (KV policies that keep the most
	// attended tokens of each head): Model.AttentionMassLanes rows of equal length, at
	// least ContextLen each, row l·KVHeads+g for KV head g of layer l, whose entry j is
	// the probability with which those tokens' query heads of g's group attend to context
	// entry j, summed. Only on a backend that reports it (backend.AttentionMasser), with
	// the model not split.
	Mass     []float32
	MassFrom int
	// Adapter, when set, is the LoRA adapter whose updates the sequence's projections
	// take (see Model.EnableLoRA); nil runs the base model.
	Adapter *lora.Adapter
}

// check validates a batch against the model's vocabulary and the cache.
func (b *Batch) check(vocab int, kv *KVCache) error {
	n := len(b.Tokens)
	switch {
	case n == 0:
		return fmt.Errorf("batch: no tokens")
	case len(b.Positions) != n || len(b.SlotMapping) != n:
		return fmt.Errorf("batch: %d tokens, %d positions, %d slots", n, len(b.Positions), len(b.SlotMapping))
	case len(b.Seqs) == 0:
		return fmt.Errorf("batch: no sequences")
	}
	for i, tok := range b.Tokens {
		if tok < 0 || int(tok) >= vocab {
			return fmt.Errorf("batch: token %d: id %d outside the vocabulary of %d", i, tok, vocab)
		}
		if s := b.SlotMapping[i]; int(s) >= kv.Slots() {
			return fmt.Errorf("batch: token %d: slot %d outside the cache's %d slots", i, s, kv.Slots())
		}
	}
	next := 0
	for i, s := range b.Seqs {
		if s.QueryStart != next || s.QueryLen <= 0 || s.QueryStart+s.QueryLen > n {
			return fmt.Errorf("batch: sequence %d: tokens [%d, %d) do not follow on at %d of %d", i, s.QueryStart, s.QueryStart+s.QueryLen, next, n)
		}
		next += s.QueryLen
		if s.ContextLen > len(s.BlockTable)*kv.BlockSize {
			return fmt.Errorf("batch: sequence %d: context of %d tokens exceeds its %d blocks", i, s.ContextLen, len(s.BlockTable))
		}
		if s.ContextLen < s.QueryLen {
			return fmt.Errorf("batch: sequence %d: %d tokens in a context of %d", i, s.QueryLen, s.ContextLen)
		}
		if lanes := kv.massLanes(); s.Mass != nil && (len(s.Mass)%lanes != 0 || len(s.Mass)/lanes < s.ContextLen || s.MassFrom < 0 || s.MassFrom > s.QueryLen) {
			return fmt.Errorf("batch: sequence %d: attention mass of %d entries (%d rows, one per layer and kv head) from token %d, for a context of %d and %d tokens", i, len(s.Mass), lanes, s.MassFrom, s.ContextLen, s.QueryLen)
		}
		for t := s.QueryStart; t < s.QueryStart+s.QueryLen; t++ {
			if p := b.Positions[t]; p < 0 {
				return fmt.Errorf("batch: sequence %d: token %d at negative position %d", i, t, p)
			}
		}
		for j, blk := range s.BlockTable[:(s.ContextLen+kv.BlockSize-1)/kv.BlockSize] {
			if blk < 0 || int(blk) >= kv.NumBlocks {
				return fmt.Errorf("batch: sequence %d: block table entry %d: block %d outside the cache's %d blocks", i, j, blk, kv.NumBlocks)
			}
		}
	}
	if next != n {
		return fmt.Errorf("batch: sequences cover %d of %d tokens", next, n)
	}
	for _, i := range b.LogitsIndices {
		if i < 0 || i >= n {
			return fmt.Errorf("batch: logits index %d outside %d tokens", i, n)
		}
	}
	return nil
}

// fillMeta fills dst with the step metadata of b (a checked batch) for a cache of
// blockSize-token blocks, reusing dst's buffers. Tokens, positions and slots are shared
// with b, not copied.
func (b *Batch) fillMeta(dst *backend.StepMeta, blockSize int) {
	dst.Tokens, dst.Positions, dst.SlotMapping = b.Tokens, b.Positions, b.SlotMapping
	dst.QueryStarts, dst.ContextLens, dst.LogitsIndices = dst.QueryStarts[:0], dst.ContextLens[:0], dst.LogitsIndices[:0]
	dst.MaxBlocks, dst.MaxQueryLen, dst.MaxContextLen = 0, 0, 0
	for _, s := range b.Seqs {
		dst.QueryStarts = append(dst.QueryStarts, int32(s.QueryStart))
		dst.ContextLens = append(dst.ContextLens, int32(s.ContextLen))
		dst.MaxBlocks = max(dst.MaxBlocks, (s.ContextLen+blockSize-1)/blockSize)
		dst.MaxQueryLen = max(dst.MaxQueryLen, s.QueryLen)
		dst.MaxContextLen = max(dst.MaxContextLen, s.ContextLen)
	}
	dst.QueryStarts = append(dst.QueryStarts, int32(len(b.Tokens)))
	n := len(b.Seqs) * dst.MaxBlocks
	if cap(dst.BlockTables) < n {
		dst.BlockTables = make([]int32, n)
	}
	dst.BlockTables = dst.BlockTables[:n]
	clear(dst.BlockTables)
	for i, s := range b.Seqs {
		blocks := (s.ContextLen + blockSize - 1) / blockSize
		copy(dst.BlockTables[i*dst.MaxBlocks:], s.BlockTable[:blocks])
	}
	for _, i := range b.LogitsIndices {
		dst.LogitsIndices = append(dst.LogitsIndices, int32(i))
	}
}
