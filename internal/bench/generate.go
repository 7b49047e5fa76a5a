package bench

import (
	"fmt"
	"github.com/kvasir-llm/kvasir/internal/energy"
	"io"
	"math/rand/v2"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// GenerateOptions is what `kvasir bench generate` times: a random prompt of PromptLen
// tokens prefilled in chunks of Chunk, then GenLen greedy decode steps; with VerifyLen K >
// 0, also GenLen speculative verify steps of 1+K tokens per sequence against as many decode
// steps, at each batch size of VerifyBatches (default 1; see Verify).
type GenerateOptions struct {
	PromptLen, GenLen, Chunk int
	VerifyLen                int
	VerifyBatches            []int
	// Energy, when set, measures the decode's energy (GenerateResult.Energy).
	Energy *energy.Meter
}

// GenerateResult is what `bench generate --json` prints.
type GenerateResult struct {
	Model               string  `json:"model"`
	Arch                string  `json:"arch"`
	Threads             int     `json:"threads"`
	KernelSet           string  `json:"kernel_set"`
	TensorParallel      int     `json:"tensor_parallel_size"`
	PipelineParallel    int     `json:"pipeline_parallel_size"`
	PromptLen           int     `json:"prompt_len"`
	GenLen              int     `json:"gen_len"`
	PrefillSeconds      float64 `json:"prefill_seconds"`
	PrefillTokensPerS   float64 `json:"prefill_tokens_per_s"`
	DecodeSeconds       float64 `json:"decode_seconds"`
	DecodeTokensPerS    float64 `json:"decode_tokens_per_s"`
	WeightBytesPerToken int64   `json:"weight_bytes_per_token"`
	KVBytesPerToken     int64   `json:"kv_bytes_read_per_token"`
	DecodeGBPerS        float64 `json:"decode_gb_per_s"`
	ProbeGBPerS         float64 `json:"probe_gb_per_s"`
	DecodeBWRatio       float64 `json:"decode_bandwidth_ratio"`
	// Verify holds the verify-step figures (VerifyLen > 0).
	Verify []VerifyResult `json:"verify,omitempty"`
	// Energy is the decode's energy (joules per generated token, average watts), or why
	// it is not available; nil when not measured.
	Energy *energy.Report `json:"energy,omitempty"`
}

// Generate times one sequence on the loaded model with none of the engine's scheduling
// (model.Session): the prefill of a random prompt and greedy decoding, beside the memory
// bandwidth the model's CPU threads reach (the better of a probe before and one after;
// 0 on a device).
func Generate(l *kvasir.Loaded, o GenerateOptions) (GenerateResult, error) {
	m := l.Model()
	c := m.Config()
	var res GenerateResult
	if o.PromptLen <= 0 || o.GenLen <= 0 {
		return res, fmt.Errorf("--prompt-len %d --gen-len %d: need positive lengths", o.PromptLen, o.GenLen)
	}
	if o.VerifyLen < 0 {
		return res, fmt.Errorf("--verify-len %d: want 0 (off) or more", o.VerifyLen)
	}
	probe := l.ProbeBandwidth(ProbeBytes)
	s, err := m.NewSession(o.PromptLen + o.GenLen)
	if err != nil {
		return res, err
	}
	s.Chunk = o.Chunk
	r := rand.New(rand.NewPCG(7, 11))
	prompt := make([]int32, o.PromptLen)
	for i := range prompt {
		prompt[i] = int32(r.IntN(c.VocabSize))
	}
	// Warm up with the measured shapes: page the weights in and wake the workers on the
	// CPU; on a device, let the first calls of each GEMM shape and kernel (library
	// heuristics, lazy module loads) and the capture of the decode graph happen here,
	// not inside the timed runs.
	logits, err := s.Prefill(prompt)
	if err != nil {
		return res, err
	}
	next := int32(sample.Greedy(logits))
	for range 3 {
		if next, err = s.StepGreedy(next); err != nil {
			return res, err
		}
	}
	s.Reset()

	t0 := time.Now()
	if logits, err = s.Prefill(prompt); err != nil {
		return res, err
	}
	prefill := time.Since(t0)
	var span energy.Span
	if o.Energy != nil {
		span = o.Energy.Start()
	}
	t0 = time.Now()
	// Greedy decoding as the engine does it: a backend that picks the token on the device
	// copies back its id, not the logits.
	next = int32(sample.Greedy(logits))
	for i := 0; i < o.GenLen; i++ {
		if next, err = s.StepGreedy(next); err != nil {
			return res, err
		}
	}
	decode := time.Since(t0)
	var decodeEnergy *energy.Report
	if o.Energy != nil {
		r := span.End(o.GenLen)
		decodeEnergy = &r
	}
	// Probe again and keep the better figure: on a shared machine one probe can be unlucky.
	probe = max(probe, l.ProbeBandwidth(ProbeBytes))

	res = GenerateResult{
		Model: l.File().Name(), Arch: c.Arch, Threads: l.Threads(), KernelSet: l.KernelSet(),
		TensorParallel: m.Parallel().Tensor, PipelineParallel: m.Parallel().Pipeline,
		PromptLen: o.PromptLen, GenLen: o.GenLen,
		PrefillSeconds: prefill.Seconds(), PrefillTokensPerS: perSecond(o.PromptLen, prefill),
		DecodeSeconds: decode.Seconds(), DecodeTokensPerS: perSecond(o.GenLen, decode),
		WeightBytesPerToken: m.WeightBytesPerToken(),
		// Each decode step reads the whole cached context; on average the prompt plus half
		// of the generated tokens.
		KVBytesPerToken: m.KVBytesPerToken() * int64(o.PromptLen+o.GenLen/2),
		ProbeGBPerS:     probe,
		Energy:          decodeEnergy,
	}
	res.DecodeGBPerS = float64(res.WeightBytesPerToken+res.KVBytesPerToken) * res.DecodeTokensPerS / 1e9
	if probe > 0 {
		res.DecodeBWRatio = res.DecodeGBPerS / probe
	}
	if o.VerifyLen > 0 {
		batches := o.VerifyBatches
		if len(batches) == 0 {
			batches = []int{1}
		}
		if res.Verify, err = Verify(m, o.PromptLen, o.GenLen, o.VerifyLen, batches); err != nil {
			return res, err
		}
	}
	return res, nil
}

// WriteGenerate prints the figures as `kvasir bench generate` does.
func WriteGenerate(w io.Writer, r GenerateResult) {
	fmt.Fprintf(w, "model:   %s (%s), %d threads, %s kernels%s\n", r.Model, r.Arch, r.Threads, r.KernelSet, SplitInfo(r.TensorParallel, r.PipelineParallel))
	fmt.Fprintf(w, "prefill: %d tokens in %.3fs = %.1f tokens/s\n", r.PromptLen, r.PrefillSeconds, r.PrefillTokensPerS)
	fmt.Fprintf(w, "decode:  %d tokens in %.3fs = %.2f tokens/s\n", r.GenLen, r.DecodeSeconds, r.DecodeTokensPerS)
	fmt.Fprintf(w, "decode bandwidth: %.2f GB/s (%.1f MB weights + %.1f MB KV per token) = %.0f%% of the probe's %.2f GB/s\n",
		r.DecodeGBPerS, float64(r.WeightBytesPerToken)/1e6, float64(r.KVBytesPerToken)/1e6, 100*r.DecodeBWRatio, r.ProbeGBPerS)
	if r.Energy != nil {
		fmt.Fprintf(w, "decode %s\n", r.Energy)
	}
	WriteVerify(w, r.Verify)
}

// perSecond returns n per d, 0 for no time.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// SplitInfo describes a split of tensor x pipeline ranks as the commands print it, ""
// for one rank.
func SplitInfo(tensor, pipeline int) string {
	if max(tensor, 1)*max(pipeline, 1) == 1 {
		return ""
	}
	return fmt.Sprintf(", split across %d ranks (tensor-parallel %d x pipeline-parallel %d)", tensor*pipeline, tensor, pipeline)
}
