package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// flagScope says which engine flags a command takes.
type flagScope int

const (
	// loadFlags: the model and where it runs (bench generate, which drives the model
	// without an engine).
	loadFlags flagScope = iota
	// allEngineFlags: those and the engine's: the KV cache budget, the scheduler's limits,
	// prefix caching and the sampling defaults (serve, run, chat, bench offline).
	allEngineFlags
)

// engineFlags are the flags of the commands that load a model: the model, where it runs
// and, for those that run an engine, the engine's settings. options maps them to
// kvasir.Options, parsing each value once.
type engineFlags struct {
	scope                     flagScope
	model, tokenizer          string
	device                    string
	quantization              string
	sparse2of4                string
	tensor, pipeline, threads int
	kvDType                   string
	kvMemory                  string
	gpuMem                    float64
	blockSize, maxModelLen    int
	maxNumSeqs, maxBatched    int
	maxWaiting                int
	noPrefixCaching, noAsync  bool
	noJumpForward             bool
	generationConfig          string
	speculative               string
	kvPolicy                  string
	lora                      *loraFlags
	kvPool, kvOffload         string
}

// threadsPerCPU bounds --threads: more CPU workers than this many per core only contend
// (and a pool of 100000 threads never starts).
const threadsPerCPU = 64

// defaultModelHelp is the -m flag's help.
const defaultModelHelp = "model: a .gguf file, a llama2.c .bin, a Hugging Face folder, hf:ORG/REPO[/FILE] or synth:SHAPE[:TYPE] (or give it as the first argument, before or after the flags); default: the built-in random-weight model"

// addEngineFlags adds the engine flags of scope to fs.
func addEngineFlags(fs *flag.FlagSet, scope flagScope) *engineFlags {
	f := &engineFlags{scope: scope}
	fs.StringVar(&f.model, "m", "", defaultModelHelp)
	fs.StringVar(&f.tokenizer, "z", "", "tokenizer file (for a llama2.c checkpoint: tokenizer.bin)")
	fs.StringVar(&f.device, "device", "cpu", "where the model runs: cpu, or cuda (an NVIDIA GPU; cuda:N for device N, the first of a split model's GPUs)")
	fs.StringVar(&f.quantization, "quantization", "none", "quantize the weights at load: none, or fp8 (the linear layers' weights as E4M3 with a scale per output channel, from a BF16, F16 or F32 model; an FP8 checkpoint loads as FP8 without it; GPUs of compute capability 8.9 or newer)")
	fs.IntVar(&f.tensor, "tensor-parallel-size", 1, "split every layer's heads and MLP across this many ranks (GPUs, or CPU thread groups), summed by all-reduce")
	fs.IntVar(&f.pipeline, "pipeline-parallel-size", 1, "split the layers into this many pipeline stages, one rank (or tensor-parallel group) each")
	fs.IntVar(&f.threads, "threads", 0, "CPU worker threads (0: all cores)")
	fs.StringVar(&f.sparse2of4, "sparse-2of4", "off", "with --device cuda: multiply 2:4 sparse BF16/F16 linear-layer weights (kvasir prune --pattern 2:4) through cuSPARSELt (libcusparseLt.so.0), compressed at load, 44% less weight memory but slower products on an H200: off (the default: densely), auto (when the library loads, else densely with a log line) or on (the library required)")
	fs.StringVar(&f.kvDType, "kv-cache-dtype", "auto", "KV cache element type: auto (f32 on the CPU, bf16 on a GPU), f32, f16 (half the memory of f32), bf16 (GPU only), or the quantized fp8 (= fp8_e4m3), fp8_e5m2 and int8 (= q8_0): a byte per element and a float32 scale per 32 (about 1.78x the tokens of f16; CPU and GPU)")
	if scope == loadFlags {
		return f
	}
	fs.StringVar(&f.kvMemory, "kv-cache-memory", "", "KV cache budget of each rank: bytes, or with a unit (512MiB, 2GiB, 1GB) (default: 1GiB on the CPU, capped by need; on a GPU what --gpu-memory-utilization leaves)")
	fs.Float64Var(&f.gpuMem, "gpu-memory-utilization", kvasir.DefaultGPUMemoryUtilization, "with --device cuda: fraction of the GPU's memory to use for weights, KV cache and activations; the KV cache gets what the weights leave (ignored when --kv-cache-memory is set)")
	fs.IntVar(&f.blockSize, "block-size", 0, "tokens per KV block (0: 16)")
	fs.IntVar(&f.maxModelLen, "max-model-len", 0, "most prompt plus output tokens per sequence (0: the model's context length, capped by the KV cache)")
	fs.IntVar(&f.maxNumSeqs, "max-num-seqs", 0, "most sequences running at once (0: 256 on the CPU, 1024 on a GPU; run and chat: 1)")
	fs.IntVar(&f.maxBatched, "max-num-batched-tokens", 0, "token budget of one engine step (0: 2048 on the CPU, 8192 on a GPU)")
	fs.IntVar(&f.maxWaiting, "max-waiting", 0, "refuse requests when this many wait (serve answers 429) (0: no limit)")
	fs.BoolVar(&f.noPrefixCaching, "no-prefix-caching", false, "turn prefix caching off")
	fs.StringVar(&f.kvPool, "kv-pool", "", "KV pool shared by the instances of a model: redis://[user:password@]HOST:PORT[/DB]; full prefix blocks are written to it in the background and a prompt missing the local cache takes the blocks that follow from it (run Redis with --maxmemory and --maxmemory-policy allkeys-lru; a Redis down or slow only makes it miss)")
	fs.StringVar(&f.kvOffload, "kv-offload-memory", "", "host memory for KV blocks the cache evicts, an LRU tier looked up before --kv-pool: bytes, or with a unit (4GiB) (default: none)")
	fs.BoolVar(&f.noAsync, "no-async-scheduling", false, "turn asynchronous scheduling off (plan each step only after the previous one's outputs are out)")
	fs.BoolVar(&f.noJumpForward, "no-jump-forward", false, "turn jump-forward of structured output off (sample the tokens a grammar forces one step each instead of appending them in one step)")
	fs.StringVar(&f.speculative, "speculative-config", "", `speculative decoding, vLLM's JSON: {"method": "ngram"|"draft_model"|"layer_skip", "num_speculative_tokens": K (1..16), "prompt_lookup_min"/"prompt_lookup_max": N (ngram, default 5), "model": DRAFT (draft_model: a file, folder, hf: or synth: reference), "draft_layers": L (layer_skip), "dynamic": true|false (default true: each sequence's draft length chosen per step)}`)
	fs.StringVar(&f.kvPolicy, "kv-policy", "full", "KV policy of requests that name none: NAME[:key=value,...]: full (every token kept), or streaming (StreamingLLM: sink_tokens attention sinks (default 4) and a window of the latest blocks within budget_tokens (default 1024), generation going on past the context length), e.g. streaming:budget_tokens=512,sink_tokens=4")
	f.lora = addLoRAFlags(fs)
	fs.StringVar(&f.generationConfig, "generation-config", "auto", "default sampling parameters: auto (the model's generation_config.json over vLLM's neutral defaults), vllm (the neutral defaults: temperature 1, top_p 1, top_k off, min_p 0, repetition_penalty 1), or a folder whose generation_config.json to read")
	return f
}

// parse parses args into fs (parseFlags) and takes a first positional argument as the model,
// as vLLM's `vllm serve MODEL` and llama.cpp take it, parsing the flags after it too:
// `kvasir serve model.gguf --port 8001` is `kvasir serve -m model.gguf --port 8001`.
func (f *engineFlags) parse(fs *flag.FlagSet, args []string, minusOne ...string) error {
	if f.lora != nil {
		args = expandLoRAModules(args)
	}
	if err := parseFlags(fs, args, minusOne...); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return nil
	}
	m := fs.Arg(0)
	if f.model != "" && f.model != m {
		return fmt.Errorf("two models, -m %s and %s: give one (unexpected argument %q)", f.model, m, m)
	}
	f.model = m
	return parseFlags(fs, fs.Args()[1:], minusOne...)
}

// options maps the flags to kvasir.Options, each value parsed and checked here, before
// anything is loaded.
func (f *engineFlags) options() (kvasir.Options, error) {
	var opt kvasir.Options
	var err error
	if opt.Device, err = kvasir.ParseDevice(f.device); err != nil {
		return opt, fmt.Errorf("--device: %w", err)
	}
	if opt.Quantization, err = kvasir.ParseQuantization(f.quantization); err != nil {
		return opt, fmt.Errorf("--quantization: %w", err)
	}
	if f.tensor < 1 || f.pipeline < 1 {
		return opt, fmt.Errorf("--tensor-parallel-size %d --pipeline-parallel-size %d: want sizes of at least 1", f.tensor, f.pipeline)
	}
	if most := threadsPerCPU * runtime.NumCPU(); f.threads > most {
		return opt, fmt.Errorf("--threads %d: at most %d (%d per CPU core of the %d here)", f.threads, most, threadsPerCPU, runtime.NumCPU())
	}
	opt.TensorParallel, opt.PipelineParallel, opt.Threads = f.tensor, f.pipeline, f.threads
	if opt.KVCacheDType, err = kvasir.ParseKVCacheDType(f.kvDType); err != nil {
		return opt, fmt.Errorf("--kv-cache-dtype: %w", err)
	}
	if _, err := opt.KVCacheDType.On(opt.Device); err != nil {
		return opt, fmt.Errorf("--kv-cache-dtype %s with --device %s: %w", f.kvDType, opt.Device, err)
	}
	if _, err := cudabackend.ParseSparseMode(f.sparse2of4); err != nil {
		return opt, fmt.Errorf("--sparse-2of4: %w", err)
	}
	opt.CUDA.Sparse2of4 = f.sparse2of4
	opt.Log = os.Stderr
	if f.scope == loadFlags {
		return opt, nil
	}
	if f.maxModelLen > math.MaxInt32 {
		return opt, fmt.Errorf("--max-model-len %d: at most %d tokens (positions are 32-bit)", f.maxModelLen, math.MaxInt32)
	}
	if opt.KVCacheMemory, err = kvasir.ParseBytes(f.kvMemory); err != nil {
		return opt, fmt.Errorf("--kv-cache-memory: %w", err)
	}
	if f.gpuMem <= 0 || f.gpuMem > 1 {
		return opt, fmt.Errorf("--gpu-memory-utilization %g: want a fraction in (0, 1]", f.gpuMem)
	}
	if opt.GenerationConfig, err = kvasir.ParseGenerationConfig(f.generationConfig); err != nil {
		return opt, fmt.Errorf("--generation-config: %w", err)
	}
	opt.GPUMemoryUtilization, opt.BlockSize, opt.MaxModelLen = f.gpuMem, f.blockSize, f.maxModelLen
	opt.MaxNumSeqs, opt.MaxNumBatchedTokens, opt.MaxWaiting = f.maxNumSeqs, f.maxBatched, f.maxWaiting
	opt.DisablePrefixCaching, opt.DisableAsyncScheduling = f.noPrefixCaching, f.noAsync
	opt.DisableJumpForward = f.noJumpForward
	if f.kvPool != "" {
		if err := kvasir.CheckKVPoolURL(f.kvPool); err != nil {
			return opt, fmt.Errorf("--kv-pool: %w", err)
		}
		opt.KVPool = f.kvPool
	}
	if opt.KVOffloadMemory, err = kvasir.ParseBytes(f.kvOffload); err != nil {
		return opt, fmt.Errorf("--kv-offload-memory: %w", err)
	}
	if (opt.KVPool != "" || opt.KVOffloadMemory > 0) && f.noPrefixCaching {
		return opt, fmt.Errorf("--kv-pool and --kv-offload-memory need prefix caching (drop --no-prefix-caching)")
	}
	if opt.KVPolicy, err = kvasir.ParseKVPolicy(f.kvPolicy); err != nil {
		return opt, fmt.Errorf("--kv-policy: %w", err)
	}
	if err := kvasir.CheckKVPolicy(opt.KVPolicy, f.blockSize); err != nil {
		return opt, fmt.Errorf("--kv-policy: %w", err)
	}
	if err := f.lora.apply(&opt); err != nil {
		return opt, err
	}
	if f.speculative != "" {
		if opt.Speculative, err = kvasir.ParseSpeculativeConfig(f.speculative); err != nil {
			return opt, fmt.Errorf("--speculative-config: %w", err)
		}
	}
	return opt, nil
}

// speculationLine describes an engine's speculative decoding for its start-up log ("" when
// it does not speculate).
func speculationLine(e *kvasir.Engine) string {
	c := e.Speculative()
	if c == nil {
		return ""
	}
	line := "speculative decoding: " + c.String()
	if d := e.Draft(); d != nil {
		fc := d.File().Config
		line += fmt.Sprintf(" (draft %s: %d layers, dim %d, %.1f MB of weights)", d.File().Name(), fc.Layers, fc.Dim, float64(d.File().Bytes())/1e6)
	}
	return line
}

// openEngine opens the model the flags name and starts an engine on it with the flags'
// options, which tune (when set) may adjust to the model file first. A progress bar shows
// the weights' upload to a GPU.
func (f *engineFlags) openEngine(tune func(*kvasir.Options, *format.Model)) (*kvasir.Engine, error) {
	var e *kvasir.Engine
	err := f.bind(tune, func(fm *format.Model, opt kvasir.Options) (err error) {
		e, err = kvasir.OpenModel(fm, opt)
		return err
	})
	return e, err
}

// load opens the model the flags name and binds it on its backends without an engine.
func (f *engineFlags) load() (*kvasir.Loaded, error) {
	var l *kvasir.Loaded
	err := f.bind(nil, func(fm *format.Model, opt kvasir.Options) (err error) {
		l, err = kvasir.Load(fm, opt)
		return err
	})
	return l, err
}

// bind maps the flags to options, opens the model file they name, lets tune (when set)
// adjust the options to it and calls open with both, a progress bar showing an upload to
// a GPU meanwhile. The file is closed when open fails (open owns it otherwise).
func (f *engineFlags) bind(tune func(*kvasir.Options, *format.Model), open func(*format.Model, kvasir.Options) error) error {
	opt, err := f.options()
	if err != nil {
		return err
	}
	fm, err := openModel(f.model, f.tokenizer)
	if err != nil {
		return err
	}
	if tune != nil {
		tune(&opt, fm)
	}
	finish := uploadProgress(&opt, fm.Bytes())
	err = open(fm, opt)
	finish()
	if err != nil {
		fm.Close()
	}
	return err
}

// uploadProgress sets opt's upload progress to a progress bar of total bytes when the model
// goes to a GPU, and returns the function that removes the bar; on the CPU weights are used
// in place, so there is nothing to show.
func uploadProgress(opt *kvasir.Options, total int64) (finish func()) {
	if !opt.Device.CUDA {
		return func() {}
	}
	bar := newProgress("uploading weights", total, false)
	opt.UploadProgress = bar.Update
	return bar.Finish
}

// describe says where l runs: its threads and kernels on the CPU, or its device, and how
// it is split.
func describe(l *kvasir.Loaded) string {
	var where string
	switch {
	case l.OnDevice():
		where = l.KernelSet()
	case l.Model().Parallel().Ranks() > 1:
		where = fmt.Sprintf("%d threads per rank (%s kernels)", l.Threads(), l.KernelSet())
	default:
		where = fmt.Sprintf("%d threads (%s kernels)", l.Threads(), l.KernelSet())
	}
	par := l.Model().Parallel()
	return where + bench.SplitInfo(par.Tensor, par.Pipeline)
}
