package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/imatrix"
	"github.com/kvasir-llm/kvasir/internal/quantize"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "quantize", summary: "quantize a model to a GGUF file: round-to-nearest, GPTQ or AWQ, with an optional importance matrix", run: runQuantize})
}

func runQuantize(args []string) error {
	fs := newFlags("quantize", "-m IN -o OUT.gguf --dtype T [--method rtn|gptq|awq] [--calibration TEXT] [--calib-tokens N] [--imatrix FILE]")
	in := fs.String("m", "", "input model: a .gguf file, a Hugging Face folder or a llama2.c .bin")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	out := fs.String("o", "", "output .gguf file")
	dtype := fs.String("dtype", "", "weight type: q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, f16, bf16, f32, or a mixed preset: q4_k_m, q5_k_m")
	method := fs.String("method", "rtn", "rtn (round to nearest), gptq (Hessian error compensation; q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k and the k presets) or awq (activation-aware scales)")
	calib := fs.String("calibration", "", "calibration text file (gptq, awq)")
	calibTokens := fs.Int("calib-tokens", 8192, "calibration tokens to use, in windows of --calib-ctx")
	calibCtx := fs.Int("calib-ctx", 512, "calibration window length in tokens (capped by the model's context)")
	imat := fs.String("imatrix", "", "importance matrix (llama.cpp's legacy .dat format, as kvasir imatrix writes) weighing the round-to-nearest scale search")
	actOrder := fs.Bool("act-order", false, "gptq: quantize the columns with the largest inputs first (block scales then come from the unmodified weights)")
	damp := fs.String("damp", "0.01", "gptq: fraction of the Hessian's mean diagonal added to its diagonal, or auto: chosen from 0.001, 0.003, 0.01, 0.03 by the perplexity of held-out calibration windows (every fourth; the model is quantized once per damping on the others)")
	weighted := fs.Bool("weighted-scales", false, "gptq: choose the block scales by GPTQ's error weights (each column's 1/[H^-1]_ii as the later columns compensate it) instead of by the weights' magnitudes")
	regrid := fs.Bool("regrid", false, "gptq: quantize twice, the second time onto block scales chosen beforehand from the error-compensated weights the first pass rounded (twice the time)")
	noClip := fs.Bool("no-clip", false, "awq: fold the searched scales only, without the weight-clipping search")
	noScales := fs.Bool("no-scales", false, "awq: skip the activation-aware scale search; only the weight-clipping search runs")
	tokenWeights := fs.Bool("token-weights", false, "awq: weigh each calibration token's output error by 1/ms of its residual stream (what the next norm leaves of it) instead of alike, as AutoAWQ does")
	symClip := fs.Bool("symmetric-clip", false, "awq: clamp every block to a range symmetric about 0 (AutoAWQ's clipping) also on grids with a min (q4_1, q5_1, q4_k, q5_k), where the clipping search otherwise shrinks each block's two ends apart")
	awqRows := fs.Int("awq-rows", 1024, "awq: calibration rows the scale and clipping searches measure errors on (at most --calib-tokens)")
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	quiet := fs.Bool("quiet", false, "no progress output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" || *dtype == "" {
		fs.Usage()
		return fmt.Errorf("-m, -o and --dtype are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	plan, err := quantize.ParsePlan(*dtype)
	if err != nil {
		return fmt.Errorf("--dtype: %w", err)
	}
	if !strings.HasSuffix(*out, ".gguf") {
		return fmt.Errorf("-o %s: the output must be a .gguf file", *out)
	}
	gopt, err := parseDamp(*damp)
	if err != nil {
		return err
	}
	gopt.ActOrder, gopt.Weighted, gopt.Regrid = *actOrder, *weighted, *regrid
	opt := quantize.Options{Plan: plan, Method: *method, GPTQ: gopt, AWQ: quantize.AWQOptions{NoClip: *noClip, NoScales: *noScales, TokenWeighted: *tokenWeights, MaxTokens: *awqRows, SymmetricClip: *symClip}, Threads: *threads}
	if opt.Threads <= 0 {
		opt.Threads = runtime.NumCPU()
	}
	switch *method {
	case "rtn":
		if *calib != "" {
			return fmt.Errorf("--calibration is for --method gptq or awq (for rtn, make an importance matrix with kvasir imatrix and pass --imatrix)")
		}
	case "gptq", "awq":
		if *calib == "" {
			return fmt.Errorf("--method %s needs --calibration TEXT", *method)
		}
	default:
		return fmt.Errorf("--method %q: want rtn, gptq or awq", *method)
	}
	if *symClip && (*method != "awq" || *noClip) {
		return fmt.Errorf("--symmetric-clip shapes AWQ's clipping search: it needs --method awq without --no-clip")
	}
	if *imat != "" {
		f, err := imatrix.Read(*imat)
		if err != nil {
			return err
		}
		opt.Importance = f.Importance()
	}
	m, err := openModel(*in, *tok)
	if err != nil {
		return err
	}
	defer m.Close()
	if *calib != "" {
		if opt.Calibration, err = calibrationWindows(m, *calib, *calibCtx, *calibTokens); err != nil {
			return err
		}
	}
	if !*quiet {
		opt.Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "quantize: "+format+"\n", args...) }
		var bar *progress
		opt.Progress = func(done, total int64) {
			if bar == nil {
				bar = newProgress("writing", total, false)
			}
			bar.Update(done, total)
		}
		defer func() {
			if bar != nil {
				bar.Finish()
			}
		}()
	}
	if err := quantize.Quantize(m, *out, opt); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "quantize: wrote %s (%s, %s)\n", *out, plan.Name, *method)
	return nil
}

// calibrationWindows tokenizes a calibration text for m (with BOS as its vocabulary asks)
// and cuts it into windows of ctx tokens (capped by the model's context), each starting
// with BOS, at most maxTokens tokens in all.
func calibrationWindows(m *format.Model, path string, ctx, maxTokens int) ([][]int32, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(text)) == "" {
		return nil, fmt.Errorf("calibration text %s is empty", path)
	}
	if m.Vocab == nil {
		return nil, fmt.Errorf("%s has no vocabulary to tokenize the calibration text with", m.Path)
	}
	tk, err := tokenizer.New(m.Vocab)
	if err != nil {
		return nil, err
	}
	if m.Config.ContextLen > 0 {
		ctx = min(ctx, m.Config.ContextLen)
	}
	if ctx < 16 {
		return nil, fmt.Errorf("calibration window of %d tokens: want at least 16", ctx)
	}
	ids := tk.Encode(string(text), tokenizer.EncodeOptions{AddSpecial: true})
	tokens := make([]int32, len(ids))
	for i, id := range ids {
		tokens[i] = int32(id)
	}
	bos := int32(-1)
	if m.Vocab.AddBOS && m.Vocab.BOS >= 0 {
		bos = int32(m.Vocab.BOS)
	}
	w := calibrate.Chunks(tokens, ctx, bos, maxTokens)
	if len(w) == 0 {
		return nil, fmt.Errorf("calibration text %s has %d tokens: fewer than one window of %d", path, len(tokens), ctx)
	}
	return w, nil
}

// parseDamp reads --damp: a fraction in (0, 1), or auto.
func parseDamp(s string) (quantize.GPTQOptions, error) {
	if s == "auto" {
		return quantize.GPTQOptions{AutoDamp: true}, nil
	}
	d, err := strconv.ParseFloat(s, 64)
	if err != nil || !(d > 0 && d < 1) {
		return quantize.GPTQOptions{}, fmt.Errorf("--damp %q: want a fraction in (0, 1) or auto", s)
	}
	return quantize.GPTQOptions{Damp: d}, nil
}
