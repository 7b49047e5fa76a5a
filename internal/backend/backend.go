// Package backend defines the narrow op set the model is written against. A Backend owns
// memory (weights, activations, the paged KV cache, a step's metadata) and runs a handful
// of coarse ops over it: embedding, RMSNorm (fused with the residual add), matmul over a
// weight in any format the backend supports, RoPE fused with the KV cache write, paged
// attention over variable-length sequences, SwiGLU, logits gather and read-back, and the
// pieces of a mixture of experts.
//
// The CPU backend (backend/cpubackend, on the kernels of backend/cpu) runs each op eagerly
// as it is called. A device backend (backend/cudabackend, on backend/cuda) queues the ops
// on its stream, and may capture the ops of one step as a graph and replay it: within a
// step every op reads and writes tensors allocated before the step, and the only host
// synchronisation is Logits, the step's last op.
//
// Ops take their operands' shapes from the tensors (activations are [rows][cols], row-major;
// views of the first rows of a buffer come from Tensor.Rows) and check them; the contents
// of index buffers (tokens, slots, block tables) are validated by the caller before
// UploadStep. KV blocks move to and from host memory in one layout for every backend
// (KVSpec, ReadBlocks).
package backend

import (
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Tensor is a buffer owned by a backend: a weight, an activation or a routing table. Its
// contents are reached only through the backend's ops.
type Tensor interface {
	// DType is the element type the backend holds the tensor in.
	DType() quant.Type
	// Shape lists the dimensions, outermost first. The slice must not be modified.
	Shape() []int
	// Rows returns a view of the first n rows (outermost dimension) sharing t's memory,
	// which stays at the same address: a captured graph can replay over it. n must be
	// between 1 and t's row count.
	Rows(n int) Tensor
}

// KVCache is the paged key/value cache of every layer of a model, owned by a backend.
type KVCache interface {
	// Spec returns the geometry the cache was made with.
	Spec() KVSpec
}

// KVSpec is the geometry of a KV cache: Layers layers of NumBlocks blocks of BlockSize
// token slots, each slot holding KVHeads key and value vectors of HeadDim elements of
// DType. Slot s is block s/BlockSize, offset s%BlockSize.
//
// ReadBlocks and WriteBlocks move whole blocks between a cache and host memory in one
// layout, whatever the backend, so that blocks move between caches and instances of the
// same geometry and element type: block after block, in the order the ids are given,
// BlockBytes each; within a block, layer after layer; within a layer, the keys, then the
// values; within those, slot after slot of the block; each slot KVHeads vectors of
// HeadDim elements, head after head, each element of the cache's DType (KVCache.Spec:
// F32 IEEE binary32, F16 binary16, BF16 the top half of a binary32), little-endian. A
// quantized DType (quant.KVInt8, KVFP8E4M3, KVFP8E5M2) holds, in place of the elements of
// those slots, their one-byte codes in that order, then the float32 scales of their groups
// (kvquant.Group elements each), in the same order: kvquant.RowBytes per head vector.
//
// With ValuesAreKeys a slot's value vectors are its key vectors: the cache holds each
// vector once (half the memory), a write stores the keys only, attention reads the keys
// where it reads values, and the host layout of a layer is its keys alone. Multi-head
// latent attention (DeepSeek-V2/V3) caches so: its one vector a token, the rotated key
// and the latent, is both.
type KVSpec struct {
	Layers, NumBlocks, BlockSize, KVHeads, HeadDim int
	DType                                          quant.Type
	ValuesAreKeys                                  bool
}

// Vectors returns how many vectors of HeadDim a slot's kv head holds: 2 (a key and a
// value), or 1 when ValuesAreKeys.
func (s KVSpec) Vectors() int {
	if s.ValuesAreKeys {
		return 1
	}
	return 2
}

// BlockBytes returns the bytes one block of the cache takes in the host layout of
// ReadBlocks and WriteBlocks: Vectors x Layers x BlockSize x KVHeads head vectors of
// kvquant.RowBytes(DType, HeadDim) bytes (0 for a DType no cache holds).
func (s KVSpec) BlockBytes() int {
	return s.Vectors() * s.Layers * s.BlockSize * s.KVHeads * kvquant.RowBytes(s.DType, s.HeadDim)
}

// BlockCopy orders the keys and values of block Src copied into block Dst, in every layer
// (the KV manager's copy-on-write).
type BlockCopy struct {
	Src, Dst int32
}

// StepMeta is the host-side description of one forward step, built once from the batch and
// uploaded once (UploadStep): which tokens run, where each sits and where its keys and
// values go, and which sequence each belongs to. Tokens of one sequence are contiguous,
// sequence after sequence.
//
// A token's place in its sequence's context comes from the layout alone: the i-th of a
// sequence's q tokens with a context of c sits at context index c-q+i (its keys and values
// are the context's entry there, and it attends to entries 0..c-q+i). Its position is
// apart from that: RoPE rotates by Positions[t], which may be any value >= 0.
type StepMeta struct {
	// Tokens, Positions and SlotMapping have one entry per token of the step: its id, its
	// RoPE position, and the slot its keys and values are written to (a negative slot
	// skips the write).
	Tokens, Positions, SlotMapping []int32
	// QueryStarts has one entry per sequence plus one: sequence i's tokens are
	// [QueryStarts[i], QueryStarts[i+1]).
	QueryStarts []int32
	// ContextLens gives each sequence's cached tokens after the step (cached prefix plus
	// the step's tokens, which come last): at least its token count.
	ContextLens []int32
	// BlockTables is [sequences][MaxBlocks], row-major: sequence i's logical block j is
	// physical block BlockTables[i*MaxBlocks+j]. Rows are padded with zeros beyond the
	// blocks the sequence's context needs.
	BlockTables []int32
	MaxBlocks   int
	// MaxQueryLen and MaxContextLen bound the sequences' token counts and context lengths.
	MaxQueryLen, MaxContextLen int
	// LogitsIndices lists the token rows whose logits the step returns, in order.
	LogitsIndices []int32
	// TokenTypes, when set, has one entry per token: its segment (BERT's token type id),
	// read by EncoderOps.EncoderEmbedding; nil means segment 0 throughout.
	TokenTypes []int32
	// LoRASlots, when set, has one entry per token: the adapter slot whose low-rank
	// update LoRAOps.LoRAMatMul adds to its projections, or -1 for none; nil means no
	// token of the step has an adapter. LoRARanks gives each slot's rank (0 for an empty
	// slot), one entry per slot.
	LoRASlots, LoRARanks []int32
}

// NumTokens returns the number of tokens in the step.
func (m *StepMeta) NumTokens() int { return len(m.Tokens) }

// NumSeqs returns the number of sequences in the step.
func (m *StepMeta) NumSeqs() int { return len(m.QueryStarts) - 1 }

// Step is a StepMeta uploaded to a backend, handed to the ops that need it. It is valid
// until the backend's next UploadStep.
type Step interface {
	// Meta returns the host copy the step was uploaded from.
	Meta() *StepMeta
}

// Rope describes a model's rotary position embedding.
type Rope struct {
	// InvFreq holds one inverse frequency per rotated pair (F32, Dim/2 values), the
	// model's context scaling applied.
	InvFreq Tensor
	// Dim is the number of rotated dimensions per head (even, at most the head size).
	Dim int
	// NeoX rotates pairs (i, i+Dim/2) instead of (2i, 2i+1).
	NeoX bool
	// MScale multiplies cos and sin (YaRN's attention factor); 1 for none.
	MScale float32
}

// AttentionMasser is implemented by backends that report attention probabilities, for KV
// policies that keep the most attended tokens (H2O, SnapKV).
type AttentionMasser interface {
	// AttentionMass adds, for each sequence i of the step with mass[i] not nil, the
	// attention probabilities of its query tokens from its from[i]-th on over its
	// context, per KV head (summed over the query heads of its group), to mass[i]: host
	// memory holding the layer's KVHeads rows of equal length, each at least the
	// sequence's ContextLen, entry j of row g for context entry j of KV head g. It is what
	// Attention with the same arguments weighs the values by. q is rotated, as Attention
	// takes it.
	AttentionMass(mass [][]float32, from []int, q Tensor, kv KVCache, layer int, scale float32, st Step) error
}

// AttentionOptions are the settings of one layer's attention beyond the causal default.
type AttentionOptions struct {
	// Scale multiplies q·k before anything else.
	Scale float32
	// Window, when > 0, limits a token at context index i to the entries i-Window+1..i
	// (Window entries, itself included): sliding-window attention. 0 attends to all.
	Window int
	// Softcap, when > 0, replaces each scaled score s by Softcap * tanh(s / Softcap)
	// before the softmax (Gemma 2's attention logit soft-capping).
	Softcap float32
}

// Expert is one routed expert's SwiGLU MLP: down(silu(gate·x) * up·x).
type Expert struct {
	Gate, Up, Down Tensor
}

// Backend runs the model's ops on one device. All methods but Run, Name and Close must be
// called from inside Run.
type Backend interface {
	// Name describes the backend and its device, e.g. "cpu (2 threads, avx2 kernels)".
	Name() string
	// Run runs fn where the backend's ops may be called: on the device's goroutine for a
	// GPU backend, which serializes calls. A whole forward step runs inside one Run. fn
	// must not call Run.
	Run(fn func() error) error
	// Close releases the backend and everything it allocated.
	Close() error

	// UploadWeight makes a tensor of a model's weight: matrices are kept in their block
	// format (the CPU backend wraps the file's mapped bytes without a copy), 1-D tensors
	// (norms, biases, frequencies) are decoded to F32.
	UploadWeight(t *format.Tensor) (Tensor, error)
	// NewTensor allocates a zeroed tensor of the given shape (F32 or I32 activations).
	NewTensor(dtype quant.Type, shape ...int) (Tensor, error)
	// Free releases a tensor made by UploadWeight or NewTensor (not a view).
	Free(t Tensor) error
	// NewKVCache allocates a zeroed KV cache.
	NewKVCache(spec KVSpec) (KVCache, error)
	// UploadStep makes meta available to the step's ops.
	UploadStep(meta *StepMeta) (Step, error)

	// Embedding writes row t of out ([tokens][dim], F32) from row Tokens[t] of table.
	Embedding(out, table Tensor, st Step) error
	// RMSNorm writes x / sqrt(mean(x²) + eps) * weight to out, row by row; out may be x.
	RMSNorm(out, x, weight Tensor, eps float32) error
	// RMSNormResidual is the fused residual step of a pre-norm transformer: residual += x,
	// then out = RMSNorm(residual) * weight, row by row.
	RMSNormResidual(out, residual, x, weight Tensor, eps float32) error
	// HeadNorm normalizes each head of x ([rows][heads*len(weight)]) in place by RMSNorm
	// with weight (Qwen3's QK norm).
	HeadNorm(x, weight Tensor, eps float32) error
	// MatMul computes out = x · wᵀ: out is [rows][w rows], x is [rows][w cols].
	MatMul(out, x, w Tensor) error
	// AddBias adds bias (1-D) to every row of x.
	AddBias(x, bias Tensor) error
	// RopeKVWrite rotates q ([tokens][heads*HeadDim]) and k ([tokens][KVHeads*HeadDim])
	// in place by each token's position (StepMeta.Positions), then writes k and v into
	// layer's cache at each token's slot (k alone into a cache whose values are its keys,
	// KVSpec.ValuesAreKeys: v must then be k).
	RopeKVWrite(q, k, v Tensor, rope Rope, kv KVCache, layer int, st Step) error
	// Attention computes causal attention of every sequence's query tokens over its paged
	// context in layer's cache (prefill chunks and decode tokens alike): a token at context
	// index i (see StepMeta: from the step's layout, not from Positions) attends to the
	// context's entries 0..i through its block table, scores scaled by scale. q and out
	// are [tokens][heads*HeadDim]; query head h uses kv head h/(heads/KVHeads).
	Attention(out, q Tensor, kv KVCache, layer int, scale float32, st Step) error
	// AttentionWith is Attention with the variations some architectures need (see
	// AttentionOptions): a sliding window (Mistral, Gemma's local layers) and soft-capped
	// scores (Gemma 2).
	AttentionWith(out, q Tensor, kv KVCache, layer int, opt AttentionOptions, st Step) error
	// SwiGLU computes out = silu(gate) * up element-wise; out may be gate or up.
	SwiGLU(out, gate, up Tensor) error
	// GeGLU computes out = gelu(gate) * up element-wise with the tanh approximation of GELU,
	// gelu(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g³))) (Gemma's MLP); out may be
	// gate or up.
	GeGLU(out, gate, up Tensor) error
	// Scale multiplies every element of x (F32) by s in place (Gemma's and Granite's
	// embedding, residual and logit multipliers).
	Scale(x Tensor, s float32) error
	// Add writes a + b element-wise to out (F32, one shape); out may be a or b (OLMo 2's
	// residual stream, which no pre-norm folds in).
	Add(out, a, b Tensor) error
	// SumSquares writes the sum of the squares of each row of x into out (F32 [rows][1]):
	// the first half of an RMSNorm whose rows are split across tensor-parallel ranks
	// (OLMo 2's QK norm over all heads), whose sums are then all-reduced.
	SumSquares(out, x Tensor) error
	// RMSNormSplit normalizes x in place by the summed squares of its whole rows:
	// x[r][c] = x[r][c] / sqrt(sumSquares[r] / n + eps) * weight[c], n the whole row's
	// length (weight is this rank's part of it).
	RMSNormSplit(x, sumSquares, weight Tensor, n int, eps float32) error
	// GatherRows writes row j of out from row LogitsIndices[j] of in.
	GatherRows(out, in Tensor, st Step) error
	// RouteExperts picks each token's experts from router logits ([tokens][experts]):
	// the k = ids' column count experts of highest softmax probability, best first (lower
	// index on ties), into ids (I32 [tokens][k]) with their probabilities into gains (F32
	// [tokens][k]), renormalized to sum to 1 over the chosen ones when normalize is set.
	RouteExperts(ids, gains, logits Tensor, normalize bool) error
	// ExpertMLP writes out[t] = sum over j of gains[t][j] * experts[ids[t][j]](x[t]): the
	// tokens routed to one expert are multiplied together, so each expert's weights are
	// read once.
	ExpertMLP(out, x, ids, gains Tensor, experts []Expert) error
	// GatedAdd adds sigmoid(x[t]·gate) * y[t] to out[t] for every row t (the gate of
	// Qwen2-MoE's shared expert; gate is 1-D).
	GatedAdd(out, y, x, gate Tensor) error
	// Logits computes x · wᵀ ([rows][vocabulary]) into the host slice dst: the step's
	// last op and its only host synchronisation.
	Logits(dst []float32, x, w Tensor) error

	// CopyBlocks copies blocks of kv as ordered, in every layer, in order.
	CopyBlocks(kv KVCache, copies []BlockCopy) error
	// ReadBlocks copies the keys and values of blocks, every layer, out of kv into dst in
	// the host layout (see KVSpec), after the ops queued so far; it returns once dst holds
	// them. len(dst) must be len(blocks) x kv.Spec().BlockBytes().
	ReadBlocks(kv KVCache, blocks []int32, dst []byte) error
	// WriteBlocks overwrites the keys and values of blocks, every layer, of kv from src in
	// the host layout, in order (a block named twice takes the later); the ops queued
	// after it see them, and src may be reused once it returns. len(src) must be
	// len(blocks) x kv.Spec().BlockBytes().
	WriteBlocks(kv KVCache, blocks []int32, src []byte) error
}

// StepGrapher is implemented by backends that can capture the ops of a step as a graph
// and replay it. Steps of a few tokens per sequence (decode steps of one, speculative
// verification of 1+k) are padded by the caller to the shape GraphShape returns, so that
// steps of one shape share a graph: each sequence's tokens are followed by padding tokens
// up to the shape's tokens per sequence (its context grows by as many), padding sequences
// fill the bucket, every padding token writes no keys and values (slot -1), and the step
// takes a logits row for every token, the rows asked for first (in their order).
type StepGrapher interface {
	// GraphShape returns the shape a step of seqs sequences and tokens tokens, the longest
	// sequence of maxQuery tokens, is padded to for graph replay: bucket sequences (at
	// least seqs) of queryLen tokens each (at least maxQuery); ok is false when such a step
	// is not replayed as a graph (it then runs as it is).
	GraphShape(seqs, tokens, maxQuery int) (bucket, queryLen int, ok bool)
	// RunStep runs ops, which queues the ops of step st after UploadStep and before the
	// read-back. For a step of a graph shape it may capture them as a graph the first
	// times a step of st's shape is seen for owner (any value naming the buffers the ops
	// use) and replay the graph afterwards instead of calling ops.
	RunStep(st Step, owner any, ops func() error) error
}

// ArgmaxLogits is implemented by backends that pick each row's greedy token themselves
// (on the device, so that full logits need not be copied back).
type ArgmaxLogits interface {
	// LogitsArgmax computes x · wᵀ and writes, for each row of x, the index of its largest
	// logit (the lowest index among ties; NaN never wins unless every logit is) into dst,
	// one entry per row: the step's last op and its only host synchronisation. masks is
	// nil or has one vocabulary mask per row (see MaskWords; a nil entry allows every
	// token): a token its row's mask disallows never wins. A row none of whose allowed
	// tokens has a logit other than NaN (a mask that allows nothing: the caller's bug) gets
	// id 0.
	LogitsArgmax(dst []int32, x, w Tensor, masks [][]uint32) error
}

// SampleRow is one logits row's sampling settings for LogitsSampler: the distribution is
// softmax(logits / Temperature) restricted to the TopK largest logits (<= 0: no limit),
// then to the smallest set of those whose probability reaches TopP (>= 1: no limit), ties
// at either threshold kept; the token drawn is where the cumulative probability, summed in
// token-id order, first exceeds Uniform. A row with TopK 1 and Uniform 0 is the greedy
// choice (the lowest id among tied largest logits).
type SampleRow struct {
	Temperature float32 // > 0
	TopK        int32
	TopP        float32
	Uniform     float32 // in [0, 1): the row's random draw
	// Mask is the row's vocabulary mask (see MaskWords): nil allows every token. A token
	// it disallows counts as a logit of -Inf before temperature, top-k and top-p, so it is
	// never drawn. A row whose mask allows nothing (the caller's bug) draws token 0.
	Mask []uint32
}

// LogitsSampler is implemented by backends that can draw each row's token on the device,
// so that full logits need not be copied back when sampling with a temperature.
type LogitsSampler interface {
	// LogitsSample computes x · wᵀ and writes, for each row of x, the token drawn as
	// rows[i] says into dst: the step's last op and its only host synchronisation.
	LogitsSample(dst []int32, x, w Tensor, rows []SampleRow) error
}

// MultiMatMuler is implemented by backends that multiply one input by several weights in
// one pass (a layer's q, k and v projections), reading the input once and launching once.
type MultiMatMuler interface {
	// MatMuls computes outs[i] = x · ws[i]ᵀ for every i, as MatMul would one by one.
	MatMuls(outs []Tensor, x Tensor, ws []Tensor) error
}

// SwiGLUMatMuler is implemented by backends that compute a SwiGLU MLP's gate and up
// projections and their product in one pass.
type SwiGLUMatMuler interface {
	// MatMulSwiGLU computes out = silu(x · gateᵀ) * (x · upᵀ), as two MatMuls and SwiGLU
	// would; out is [rows][gate rows].
	MatMulSwiGLU(out, x, gate, up Tensor) error
}

// LoRAOps is implemented by backends that add low-rank adapters' updates to a projection's
// output, for many adapters in one step (multi-LoRA serving, S-LoRA and Punica's
// segmented gather matmul): each token picks its adapter by StepMeta.LoRASlots.
//
// A projection of in to out features keeps its resident adapters in two F32 tensors made by
// NewTensor with one slot per adapter, each of up to R ranks: a, [slots*R][in], holds slot
// s's A (rank x in) in rows s*R.., and b, [slots*R][out], its B transposed (rank x out,
// the adapter's scale folded in) in rows s*R..: both are read a row per rank, along
// their long side. Ranks beyond a slot's (StepMeta.LoRARanks) are not read.
type LoRAOps interface {
	// WriteRows overwrites rows row.. of t (F32, [rows][cols]) with data, a whole number
	// of rows, after the ops queued so far (a slot paged in); data may be reused once it
	// returns.
	WriteRows(t Tensor, row int, data []float32) error
	// LoRAMatMul adds, for every token t of the step whose slot s = LoRASlots[t] is >= 0,
	// B_s·(A_s·x[t]) to out[t], over slot s's first LoRARanks[s] ranks. out is
	// [tokens][out], x [tokens][in], and u, [tokens][R] F32, is scratch for A_s·x[t] (R
	// is u's row length).
	// Without LoRASlots it does nothing.
	LoRAMatMul(out, x, u, a, b Tensor, st Step) error
}

// LoRAGroupOps is implemented by LoRA backends that add the updates of several projections
// taking the same input (q, k and v; gate and up) in one pass over the step's tokens, so
// that a layer costs a few launches rather than two per projection.
type LoRAGroupOps interface {
	// LoRAGroupMax is the most projections one LoRAMatMulGroup call takes.
	LoRAGroupMax() int
	// LoRAMatMulGroup does LoRAMatMul(outs[g], x, ·, as[g], bs[g], st) for every g, with u,
	// [tokens][len(outs)*R] F32, as their scratch (R from as[g]'s rows per slot).
	LoRAMatMulGroup(outs []Tensor, x, u Tensor, as, bs []Tensor, st Step) error
}

// RowReader is implemented by backends that copy an activation's rows back to the host
// (a decoder's final hidden states, for embeddings).
type RowReader interface {
	// ReadRows copies x (F32, [rows][cols]) into dst (rows x cols values, row after row)
	// after the ops queued so far; it returns once dst holds them.
	ReadRows(dst []float32, x Tensor) error
}

// KVElementSizer is implemented by backends whose KV cache holds elements of a size of
// their own choosing, whatever KVSpec.DType asks. (The CPU and CUDA backends hold what the
// spec asks and do not implement it.)
type KVElementSizer interface {
	// KVBytesPerElement returns the bytes one cached key or value element takes.
	KVBytesPerElement() int
}

// MemoryReporter is implemented by backends with a memory of their own (a GPU's), so that
// the KV cache can be sized from what the weights left free.
type MemoryReporter interface {
	// MemoryInfo returns the device's free and total memory in bytes.
	MemoryInfo() (free, total int64, err error)
	// AllocatedBytes returns the device memory the backend's tensors hold (weights, caches,
	// activations), which is this process's share of the used memory MemoryInfo implies.
	AllocatedBytes() int64
}

// KVRowBytes returns the bytes one cached key or value head vector of headDim elements
// takes on be when its cache is asked for dtype elements (KVSpec.DType): headDim of its
// own element size when it implements KVElementSizer, else kvquant.RowBytes (4 bytes an
// element for F32, 2 for F16, 1 and a scale per group for the quantized types; 4 for a
// type no cache holds).
func KVRowBytes(be Backend, dtype quant.Type, headDim int) int {
	if s, ok := be.(KVElementSizer); ok {
		if n := s.KVBytesPerElement(); n > 0 {
			return n * headDim
		}
	}
	if n := kvquant.RowBytes(dtype, headDim); n > 0 {
		return n
	}
	return 4 * headDim
}

// Communicator joins one rank's backend to a group of ranks that run each step together:
// the ranks of one tensor-parallel group, which sum their partial results after the
// attention and MLP blocks, or the stages of a pipeline, which pass activations on. Its
// data methods are called inside the rank backend's Run (on a device backend they are
// queued on the rank's stream, and may be captured in a step graph), and every rank of the
// group makes the same calls in the same order.
type Communicator interface {
	// Rank returns this member's index in the group, from 0 to Size()-1.
	Rank() int
	// Size returns the number of ranks in the group.
	Size() int
	// AllReduceSum replaces t, an activation of this rank's backend, by the element-wise
	// sum of every rank's t (same shape and type on every rank). Every rank receives the
	// same values, bit for bit.
	AllReduceSum(t Tensor) error
	// Send passes t's contents to rank peer, which takes them with Recv into a tensor of
	// the same shape and type. Sends from one rank to another are received in order; Send
	// may return before the peer has received.
	Send(t Tensor, peer int) error
	// Recv overwrites t with the contents of the next Send from rank peer.
	Recv(t Tensor, peer int) error
	// Abort breaks the group: calls pending on any member and every later call return an
	// error. A rank whose step fails aborts, so that its peers do not wait forever.
	Abort()
	// Close releases this member's part of the group (outside Run).
	Close() error
}

// Grouper is implemented by backends whose instances can form a Communicator group: the
// CPU backend (ranks are goroutines of one process exchanging through memory) and the
// CUDA backend (NCCL).
type Grouper interface {
	// NewGroup makes a group of len(members) ranks, members[i] being rank i, and returns
	// each rank's Communicator in rank order. members must all be of the receiver's kind
	// (the receiver is usually members[0]). It is called outside Run.
	NewGroup(members []Backend) ([]Communicator, error)
}

// BiasedRouter is implemented by backends that route experts as DeepSeek-V3 does.
type BiasedRouter interface {
	// RouteExpertsBiased picks each token's k = ids' column count experts from router
	// logits ([tokens][experts]) by sigmoid scores s = 1/(1+exp(-logit)): the choice is
	// made on s + bias (bias F32 [experts], nil for none); with groups > 1 the experts are
	// split into groups equal runs, each scored by the sum of its two best s + bias, and
	// only the groupsUsed best groups' experts compete (the lower index on ties; they
	// must hold at least k experts). The k
	// best, best first (lower index on ties), go into ids (I32 [tokens][k]) with their s
	// (without the bias) into gains (F32 [tokens][k]), divided by their sum when
	// normalize is set.
	RouteExpertsBiased(ids, gains, logits, bias Tensor, groups, groupsUsed int, normalize bool) error
}

// LayerKVReader is implemented by backends that copy one layer's keys and values of blocks
// out of a cache in the middle of a step (the model's per-layer hook, Batch.AfterLayer),
// so that a prefill instance sends a layer's KV while the next layer computes.
type LayerKVReader interface {
	// ReadLayerBlocks queues a copy of layer's keys and values of blocks out of kv, after
	// the ops queued so far, into dst in the host layout of one layer of ReadBlocks (block
	// after block; within a block the keys, then the values): len(dst) must be len(blocks)
	// x kv.Spec().BlockBytes() / Layers. It is called inside Run, between the ops of a
	// step, and does not hold up the ops queued after it (a device goes on computing the
	// next layers); the wait it returns, called once from any goroutine, returns when dst
	// holds the copy. Every wait of a step must have returned before the step's next
	// ReadLayerBlocks of layer 0 (the next step's), which may reuse the buffers behind it.
	ReadLayerBlocks(kv KVCache, layer int, blocks []int32, dst []byte) (wait func() error, err error)
}
