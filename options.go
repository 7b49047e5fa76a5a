package kvasir

import (
	"io"
	"log/slog"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// DefaultKVCacheMemory is the KV cache budget when Options.KVCacheMemory is 0 (capped at what
// MaxNumSeqs sequences of MaxModelLen tokens need).
const DefaultKVCacheMemory = 1 << 30

// DefaultGPUMemoryUtilization is the share of a GPU's memory used when
// Options.GPUMemoryUtilization is 0, as vLLM's default.
const DefaultGPUMemoryUtilization = 0.9

// Options configures a model and the Engine on it. Zero values pick defaults. The
// environment variables listed at EnvCPUKernels override some of them.
type Options struct {
	// Device is where the model runs: the CPU (the zero value) or a GPU.
	Device Device
	// TensorParallel and PipelineParallel split the model across ranks (0 or 1: not
	// split; see model.Parallel): each rank holds a slice of every layer's heads and MLP,
	// of the layers of one pipeline stage, and the matching part of the KV cache. On a GPU
	// the ranks are consecutive GPUs from Device.Ordinal; on the CPU, groups of Threads.
	TensorParallel, PipelineParallel int
	// Threads is the number of CPU worker threads, shared among the ranks of a split model
	// (0: all cores).
	Threads int
	// CPUKernels names the CPU kernel set, as cpu.KernelSets lists them ("": the fastest
	// this CPU runs; "generic": the pure-Go kernels).
	CPUKernels string
	// CPUWeightsInPlace keeps the CPU backends' weight matrices in the model file's mapping
	// instead of copying them at load into memory backed by huge pages: one copy less of
	// resident memory and a faster load, for decode steps about a fifth slower where the
	// kernel maps the file in 4 KiB pages (docs/BENCHMARKS.md, issue 22's third section).
	CPUWeightsInPlace bool
	// CUDA holds the CUDA backends' settings.
	CUDA CUDAOptions
	// Backends, when set, run the model instead of backends made for Device: one per rank,
	// stage-major, all of one kind. The caller closes them after the Engine. (Device then
	// only says what KVCacheAuto means.)
	Backends []backend.Backend
	// Quantization quantizes the weights at load (QuantizationNone: the file's types).
	Quantization Quantization
	// KVCacheDType is the KV cache's element type (KVCacheAuto: f32 on the CPU, bf16 on a
	// GPU; bf16 on a GPU only; the quantized KVCacheInt8, KVCacheFP8E4M3 and
	// KVCacheFP8E5M2 on both, see docs/KV_CACHE.md).
	KVCacheDType KVCacheDType
	// KVCacheMemory is the KV cache budget in bytes of each rank (0: DefaultKVCacheMemory
	// on the CPU; on a device with memory of its own, what GPUMemoryUtilization leaves).
	KVCacheMemory int64
	// GPUMemoryUtilization is the fraction of a device's memory kvasir may use in all
	// (weights, KV cache and a reserve for activations); the KV cache gets what the weights
	// leave of it. 0 means DefaultGPUMemoryUtilization. Ignored on the CPU.
	GPUMemoryUtilization float64
	// UploadProgress, when set, is told the bytes of weights uploaded so far.
	UploadProgress func(done, total int64)
	// BlockSize is the tokens per KV block (0: 16).
	BlockSize int
	// MaxNumSeqs caps concurrently running sequences (0: 256 on the CPU, GPUMaxNumSeqs on
	// a GPU).
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step (0: 2048 on the CPU,
	// GPUMaxNumBatchedTokens on a GPU).
	MaxNumBatchedTokens int
	// MaxModelLen caps prompt plus output tokens (0: the model's context length, capped by
	// the KV cache).
	MaxModelLen int
	// DisablePrefixCaching turns prefix caching off; DisableChunkedPrefill makes prompts wait
	// for a step with room for all of their remaining tokens.
	DisablePrefixCaching, DisableChunkedPrefill bool
	// DisableAsyncScheduling runs each engine step's forward pass and host work one after
	// the other instead of overlapping them (see engine.Config).
	DisableAsyncScheduling bool
	// DisableJumpForward turns jump-forward of structured output off: the tokens a
	// request's grammar forces (a fixed key, `": "`) are then sampled one step each instead
	// of appended and computed together in one step.
	DisableJumpForward bool
	// MaxWaiting refuses requests with ErrQueueFull when that many wait (0: no limit).
	MaxWaiting int
	// Speculative, when set, turns on speculative decoding (vLLM's --speculative-config;
	// see ParseSpeculativeConfig): a proposer, a draft model or the target's first layers
	// guess up to K tokens per decoding sequence, which the model verifies in the
	// sequence's next step, keeping exactly the tokens its own sampling gives. A draft
	// model is loaded as the model is, on its backends, and its keys and values share the
	// KV cache's blocks (and budget). A drafting sequence's steps do not overlap each other
	// under asynchronous scheduling.
	Speculative *SpeculativeConfig
	// EnableLoRA serves LoRA adapters (vLLM's --enable-lora): LoRAModules at start,
	// more through Engine.LoadLoRA. MaxLoRAs adapters (DefaultMaxLoRAs when 0) may run in
	// one step, their weights held in as many slots on the device, the least recently
	// used replaced first; MaxLoRARank (DefaultMaxLoRARank when 0) bounds their rank.
	// LoRAModules alone enable it too.
	EnableLoRA  bool
	LoRAModules []LoRAModule
	MaxLoRAs    int
	MaxLoRARank int
	// KVPolicy is the KV policy of requests that name none (see KVPolicySpec; the zero
	// value keeps every token). A request's Request.KVPolicy overrides it, its unset
	// settings taking these.
	KVPolicy KVPolicySpec
	// GenerationConfig says where Engine.SamplingDefaults come from (the zero value: the
	// model's generation_config.json over vLLM's neutral defaults).
	GenerationConfig GenerationConfig
	// Tokenizer names a separate tokenizer file (a llama2.c checkpoint's tokenizer.bin).
	Tokenizer string
	// ModelLimits bounds the counts the header of a model file Open reads may declare
	// (layers, heads, head dimension, hidden and feed-forward sizes, vocabulary, context,
	// experts); zero fields take format.DefaultLimits (docs/API.md lists them).
	ModelLimits format.Limits
	// Log, when set, receives notes while loading: a draft model's download progress, a
	// synthesized draft's warning, the CUDA backends' 2:4 sparse weights (CUDAOptions.Sparse2of4).
	Log io.Writer
	// OnRequestDone, when set, receives every finished request's stats, from the engine
	// loop: it must return quickly.
	OnRequestDone func(RequestStats)
	// OnStepDone, when set, receives the token counts of every engine step that brought
	// tokens, from the engine loop: it must return quickly.
	OnStepDone func(StepStats)
	// OnKVEvent, when set, receives every block that enters or leaves the prefix cache
	// (its chained hash), from the engine loop: it must return quickly. A router keeps
	// these to know what each instance caches (see Engine.BlockHashes).
	OnKVEvent func(KVEvent)
	// KVPool is the Redis server of a KV pool shared by the instances of a model,
	// redis://[user:password@]host:port[/db] ("": none). Full prefix blocks are written to
	// it asynchronously; a prompt whose prefix misses the local cache takes the blocks
	// that follow from it instead of computing them. Run the server with maxmemory and
	// maxmemory-policy allkeys-lru: eviction is Redis's. A server that is down or slow only
	// makes the pool miss (a warning on KVPoolLog, and Engine.KVPoolStats count it).
	KVPool string
	// KVOffloadMemory is the bytes of host memory kept for blocks the KV cache evicts, an
	// LRU tier consulted before KVPool (0: none).
	KVOffloadMemory int64
	// KVPoolLog receives the pool's warnings (nil: slog.Default()).
	KVPoolLog *slog.Logger
	// pooling, set by OpenEmbedder, makes the engine a pooling engine (engine.Config.Pooling)
	// for a decoder's embeddings.
	pooling string
}

// CUDAOptions are the settings of the CUDA backends (see cudabackend.BackendOptions).
type CUDAOptions struct {
	// OpTime synchronises around every GPU op and prints per-op device times when the
	// backends close: a profiler for when nsys is absent (KVASIR_CUDA_OPTIME=1).
	OpTime bool
	// DisablePDL turns off programmatic dependent launch of the decode kernels
	// (KVASIR_CUDA_PDL=0).
	DisablePDL bool
	// DisableShadows makes cuBLAS steps cast their activations to BF16, and the int8
	// quantized GEMVs round theirs, with a kernel of their own instead of reading the copy
	// the norm or SwiGLU wrote (KVASIR_CUDA_SHADOW=0).
	DisableShadows bool
	// WidenQuantized uploads quantized matrices dequantized to BF16, as kvasir did before
	// its GPU kernels read GGML's block layouts (KVASIR_CUDA_QUANT=0): for comparisons.
	WidenQuantized bool
	// KeepGGMLLayout uploads Q8_0 and Q6_K matrices in GGML's blocks instead of repacked
	// (KVASIR_CUDA_REPACK=0). By default, matrices whose rows are whole super-blocks are
	// repacked (cuda.Repacked) so that the kernels load their quants 16 bytes at a time
	// instead of 2: the same products bit for bit, 1.1-1.7x faster GEMVs on an H200.
	KeepGGMLLayout bool
	// QuantGEMV names the kernel of decode's quantized GEMV (KVASIR_CUDA_GEMVQ): split8
	// (the default), which rounds the activations to 8 bits for the GPU's int8 dot
	// products, or split, on float32 activations; empty, the default.
	QuantGEMV string
	// Sparse2of4 says when 2:4 sparse BF16 or F16 linear-layer weights (kvasir prune
	// --pattern 2:4) are compressed at load and multiplied through cuSPARSELt
	// (libcusparseLt.so.0, loaded at the first such weight): off (or "", the default:
	// always densely; on the H200 the sparse products are slower), auto (when the library
	// loads, else densely with a log line) or on (the library required: without it loading
	// fails).
	Sparse2of4 string
}

// GPUMaxNumBatchedTokens and GPUMaxNumSeqs are a GPU's step token budget and running
// sequences when none are set, vLLM's on large GPUs. A GPU runs a step of 8,192 prompt
// tokens at tensor-core speed, and a decode batch of hundreds of sequences at little more
// than the cost of one, so the CPU's 2,048 and 256 left a busy server's requests queued:
// ShareGPT's 500 prompts at rate inf on an H200 (8B BF16) went from 22.4 req/s and a mean
// TTFT of 9.1 s to 31.8 req/s and 5.1 s (docs/GPU_RESULTS.md).
const (
	GPUMaxNumBatchedTokens = 8192
	GPUMaxNumSeqs          = 1024
)
