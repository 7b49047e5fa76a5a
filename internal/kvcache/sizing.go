package kvcache

import (
	"fmt"
	"math"
)

// Sizing is the KV cache's size derived from a model's shape and a memory budget; its
// String is the start-up log line.
type Sizing struct {
	Layers, KVHeads, HeadDim, BytesPerElem int
	// RowBytes is the bytes of one head vector of keys (or values): HeadDim x
	// BytesPerElem, or for a quantized cache (BytesPerElem 0) its codes and scales.
	RowBytes int
	// BlockSize is the number of tokens per block.
	BlockSize int
	// MemoryBytes is the budget the pool was sized from.
	MemoryBytes int64
	// Vectors is the vectors a kv head holds a token and layer: 2 (K and V), or 1 for a
	// cache whose values are its keys (see ValuesAreKeys).
	Vectors int
	// BytesPerToken is Vectors x layers x KV heads x RowBytes.
	BytesPerToken int64
	// DraftBytesPerToken is what a draft model's keys and values add per token when its
	// cache shares the blocks' numbering (see WithDraft); 0 without one.
	DraftBytesPerToken int64
	// BytesPerBlock is (BytesPerToken + DraftBytesPerToken) x BlockSize.
	BytesPerBlock int64
	// NumBlocks is the number of blocks the budget holds, the null block included
	// (pass it as Config.NumBlocks).
	NumBlocks int
	// MaxModelLen is the context length used for MaxConcurrentFullContext.
	MaxModelLen int
	// BlocksPerSequence is the number of blocks one full-context sequence needs.
	BlocksPerSequence int
	// MaxConcurrentFullContext is how many sequences at full context fit at once.
	MaxConcurrentFullContext int
}

// Plan sizes a KV cache pool: it divides memoryBytes into blocks of blockSize tokens of a
// model with the given layers, KV heads, head dimension and bytes per element, and reports
// how many full-context (maxModelLen) sequences fit at once.
func Plan(layers, kvHeads, headDim, bytesPerElem, blockSize int, memoryBytes int64, maxModelLen int) (Sizing, error) {
	if bytesPerElem <= 0 || headDim <= 0 || headDim > math.MaxInt/bytesPerElem {
		return Sizing{Layers: layers, KVHeads: kvHeads, HeadDim: headDim, BytesPerElem: bytesPerElem, BlockSize: blockSize, MemoryBytes: memoryBytes, MaxModelLen: maxModelLen},
			fmt.Errorf("kvcache: plan: layers %d, kv heads %d, head dim %d, bytes per element %d, block size %d, max model len %d: all must be positive",
				layers, kvHeads, headDim, bytesPerElem, blockSize, maxModelLen)
	}
	s, err := PlanRows(layers, kvHeads, headDim, headDim*bytesPerElem, blockSize, memoryBytes, maxModelLen)
	s.BytesPerElem = bytesPerElem
	return s, err
}

// PlanRows is Plan for a cache whose head vectors of headDim elements take rowBytes bytes
// each, whatever their element size (a quantized cache's codes and scales).
func PlanRows(layers, kvHeads, headDim, rowBytes, blockSize int, memoryBytes int64, maxModelLen int) (Sizing, error) {
	s := Sizing{
		Layers: layers, KVHeads: kvHeads, HeadDim: headDim, RowBytes: rowBytes, Vectors: 2,
		BlockSize: blockSize, MemoryBytes: memoryBytes, MaxModelLen: maxModelLen,
	}
	if layers <= 0 || kvHeads <= 0 || headDim <= 0 || rowBytes <= 0 || blockSize <= 0 || maxModelLen <= 0 {
		return s, fmt.Errorf("kvcache: plan: layers %d, kv heads %d, head dim %d, bytes per head vector %d, block size %d, max model len %d: all must be positive",
			layers, kvHeads, headDim, rowBytes, blockSize, maxModelLen)
	}
	perToken := int64(2)
	for _, f := range []int{layers, kvHeads, rowBytes} {
		if perToken > math.MaxInt64/int64(f) {
			return s, fmt.Errorf("kvcache: plan: bytes per token (2 x %d layers x %d kv heads x %d bytes per head vector) overflow int64",
				layers, kvHeads, rowBytes)
		}
		perToken *= int64(f)
	}
	s.BytesPerToken = perToken
	return s.divide()
}

// divide fills in the block size in bytes and the block counts from the bytes per token
// and the budget.
func (s Sizing) divide() (Sizing, error) {
	perToken := s.BytesPerToken + s.DraftBytesPerToken
	if perToken > math.MaxInt64/int64(s.BlockSize) {
		return s, fmt.Errorf("kvcache: plan: bytes per block (%d tokens x %d bytes) overflow int64", s.BlockSize, perToken)
	}
	s.BytesPerBlock = perToken * int64(s.BlockSize)
	blocks := s.MemoryBytes / s.BytesPerBlock
	if blocks < 2 {
		return s, fmt.Errorf("kvcache: plan: a budget of %d bytes holds %d blocks of %d bytes (%d tokens x %d bytes); need at least 2 (one is the null block)",
			s.MemoryBytes, max(blocks, 0), s.BytesPerBlock, s.BlockSize, perToken)
	}
	if blocks > math.MaxInt32 {
		blocks = math.MaxInt32
	}
	s.NumBlocks = int(blocks)
	s.BlocksPerSequence = s.MaxModelLen / s.BlockSize
	if s.MaxModelLen%s.BlockSize != 0 {
		s.BlocksPerSequence++
	}
	s.MaxConcurrentFullContext = (s.NumBlocks - 1) / s.BlocksPerSequence
	return s, nil
}

// FullContextBytes returns the bytes a pool needs to hold maxNumSeqs sequences of
// maxModelLen tokens at once, at bytesPerToken each, plus one block of blockSize tokens
// for the null block: the most a budget need be. A product beyond int64 saturates at
// math.MaxInt64 (more than any budget), never wraps; non-positive arguments give 0.
func FullContextBytes(bytesPerToken int64, maxModelLen, maxNumSeqs, blockSize int) int64 {
	if bytesPerToken <= 0 || maxModelLen <= 0 || maxNumSeqs <= 0 || blockSize <= 0 {
		return 0
	}
	return addSat(mulSat(mulSat(bytesPerToken, int64(maxModelLen)), int64(maxNumSeqs)), mulSat(bytesPerToken, int64(blockSize)))
}

// mulSat multiplies non-negative a and b, saturating at math.MaxInt64.
func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// addSat adds non-negative a and b, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// ValuesAreKeys re-plans s for a cache that holds each vector once, its values being its
// keys (multi-head latent attention's latent): half the bytes a token, so the same budget
// holds twice the blocks (give it before WithDraft).
func (s Sizing) ValuesAreKeys() (Sizing, error) {
	if s.Vectors != 2 || s.DraftBytesPerToken != 0 {
		return s, fmt.Errorf("kvcache: plan: values as keys of a plan of %d vectors a token and %d draft bytes", s.Vectors, s.DraftBytesPerToken)
	}
	s.Vectors, s.BytesPerToken = 1, s.BytesPerToken/2
	return s.divide()
}

// WithDraft re-plans s for blocks that also hold a draft model's keys and values,
// draftBytesPerToken per token (speculative decoding: the draft's cache has the same
// block numbering, so a block costs both models' bytes): the same budget, fewer blocks.
func (s Sizing) WithDraft(draftBytesPerToken int64) (Sizing, error) {
	if draftBytesPerToken < 0 || draftBytesPerToken > math.MaxInt64-s.BytesPerToken {
		return s, fmt.Errorf("kvcache: plan: %d draft bytes per token", draftBytesPerToken)
	}
	s.DraftBytesPerToken = draftBytesPerToken
	return s.divide()
}

// String returns the start-up log line; the block and token counts exclude the null block.
// For smollm2-135m in f16 with 1 GiB and an 8192-token context:
//
//	kv cache: 23040 B/token (2 x 30 layers x 3 kv heads x 64 dim x 2 B); 16-token blocks of
//	360.00 KiB; 2911 blocks = 46576 tokens in 1023.40 MiB; 5.69x concurrency at 8192 tokens
//	(5 full-context sequences)
func (s Sizing) String() string {
	usable := max(s.NumBlocks-1, 0)
	conc := 0.0
	if s.BlocksPerSequence > 0 {
		conc = float64(usable) / float64(s.BlocksPerSequence)
	}
	draft := ""
	if s.DraftBytesPerToken > 0 {
		draft = fmt.Sprintf(" + %d B/token of the draft model", s.DraftBytesPerToken)
	}
	row := fmt.Sprintf("%d dim x %d B", s.HeadDim, s.BytesPerElem)
	if s.BytesPerElem <= 0 {
		row = fmt.Sprintf("%d B per %d-dim head vector", s.RowBytes, s.HeadDim)
	}
	return fmt.Sprintf("kv cache: %d B/token (%d x %d layers x %d kv heads x %s)%s; %d-token blocks of %s; %d blocks = %d tokens in %s; %.2fx concurrency at %d tokens (%d full-context sequences)",
		s.BytesPerToken, s.Vectors, s.Layers, s.KVHeads, row, draft,
		s.BlockSize, formatBytes(s.BytesPerBlock),
		usable, usable*s.BlockSize, formatBytes(s.BytesPerBlock*int64(usable)),
		conc, s.MaxModelLen, s.MaxConcurrentFullContext)
}

// formatBytes renders n in binary units with three significant digits.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.2f %ciB", v, "KMGTP"[i])
}
