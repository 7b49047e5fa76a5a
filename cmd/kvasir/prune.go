package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/prune"
	"github.com/schollz/progressbar/v3"
)

func init() {
	register(command{name: "prune", summary: "prune a model: magnitude, Wanda or SparseGPT (unstructured or N:M), or drop heads or layers by measured importance", run: runPrune})
}

func runPrune(args []string) error {
	fs := newFlags("prune", "-m IN -o OUT --method magnitude|wanda|sparsegpt (--sparsity S | --pattern N:M) [--calibration TEXT]\n       kvasir prune -m IN -o OUT (--drop-heads N | --drop-layers N) --calibration TEXT")
	in := fs.String("m", "", "input model: a .gguf file or a Hugging Face folder (F32, F16 or BF16 weights)")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	out := fs.String("o", "", "output: a .gguf file, else a Hugging Face folder; weights keep the input's type")
	method := fs.String("method", "", "magnitude (|W|), wanda (|W| times the input channel's norm) or sparsegpt (OBS updates from the Hessian)")
	sparsity := fs.Float64("sparsity", -1, "fraction of each output row's weights set to zero, in [0, 1)")
	pattern := fs.String("pattern", "", "N:M semi-structured sparsity (2:4: two of every four consecutive weights kept), instead of --sparsity")
	dropHeads := fs.Int("drop-heads", 0, "query heads to remove from every layer, the least important by their contribution to the output projection (a multiple of the KV heads)")
	dropLayers := fs.Int("drop-layers", 0, "layers to remove, those of lowest block influence (1 - cosine of the residual stream before and after)")
	calib := fs.String("calibration", "", "calibration text file (wanda, sparsegpt, --drop-heads, --drop-layers)")
	calibTokens := fs.Int("calib-tokens", 8192, "calibration tokens to use, in windows of --calib-ctx")
	calibCtx := fs.Int("calib-ctx", 512, "calibration window length in tokens (capped by the model's context)")
	damp := fs.Float64("damp", 0.01, "sparsegpt: fraction of the Hessian's mean diagonal added to its diagonal")
	blockSize := fs.Int("block-size", 128, "sparsegpt: columns per mask choice and lazy update")
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	quiet := fs.Bool("quiet", false, "no progress output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		fs.Usage()
		return fmt.Errorf("-m and -o are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	structured := *dropHeads != 0 || *dropLayers != 0
	if structured && (*method != "" || *pattern != "" || *sparsity >= 0) {
		return fmt.Errorf("--drop-heads and --drop-layers do not combine with --method, --sparsity or --pattern: run kvasir prune twice")
	}
	var pat prune.Pattern
	if !structured {
		switch *method {
		case "magnitude", "wanda", "sparsegpt":
		case "":
			return fmt.Errorf("--method is required: magnitude, wanda or sparsegpt (or --drop-heads / --drop-layers)")
		default:
			return fmt.Errorf("--method %q: want magnitude, wanda or sparsegpt", *method)
		}
		switch {
		case *pattern != "" && *sparsity >= 0:
			return fmt.Errorf("--sparsity and --pattern exclude each other (N:M sets the sparsity to 1 - N/M)")
		case *pattern != "":
			var err error
			if pat, err = prune.ParsePattern(*pattern); err != nil {
				return fmt.Errorf("--pattern: %w", err)
			}
		case *sparsity == -1:
			return fmt.Errorf("--sparsity S or --pattern N:M is required")
		case *sparsity < 0 || *sparsity >= 1:
			return fmt.Errorf("--sparsity %g: want a fraction in [0, 1)", *sparsity)
		}
		if *method == "magnitude" && *calib != "" {
			return fmt.Errorf("--calibration is for wanda and sparsegpt (magnitude reads the weights only)")
		}
	}
	if (structured || *method != "magnitude") && *calib == "" {
		return fmt.Errorf("this pruning needs --calibration TEXT (it measures the model's activations)")
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	m, err := openModel(*in, *tok)
	if err != nil {
		return err
	}
	defer m.Close()
	var windows [][]int32
	if *calib != "" {
		if windows, err = calibrationWindows(m, *calib, *calibCtx, *calibTokens); err != nil {
			return err
		}
	}
	var logf func(string, ...any)
	layers := newCountBar("layers", m.Config.Layers, *quiet)
	var bytes *progress
	writing := func(done, total int64) {
		if bytes == nil {
			layers.Finish()
			bytes = newProgress("writing", total, *quiet)
		}
		bytes.Update(done, total)
	}
	defer func() {
		if bytes != nil {
			bytes.Finish()
		}
	}()
	if !*quiet {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "\rprune: "+format+"\n", args...) }
	}
	if structured {
		imp, err := prune.Structured(m, *out, prune.StructuredOptions{DropLayers: *dropLayers, DropHeads: *dropHeads,
			Calibration: windows, Threads: *threads, Log: logf, LayerDone: layers.Set, Progress: writing})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "prune: block influence per layer: %s\n", formatFloats(imp.LayerInfluence))
		if *dropLayers > 0 {
			fmt.Fprintf(os.Stderr, "prune: dropped layers %v\n", imp.DroppedLayers)
		}
		for l, h := range imp.DroppedHeads {
			fmt.Fprintf(os.Stderr, "prune: layer %d: head importance %s, dropped heads %v\n", l, formatFloats(imp.HeadImportance[l]), h)
		}
		fmt.Fprintf(os.Stderr, "prune: wrote %s (%d layers, %d heads)\n", *out, m.Config.Layers-*dropLayers, m.Config.Heads-*dropHeads)
		return nil
	}
	opt := prune.Options{Method: *method, Sparsity: *sparsity, Pattern: pat, Calibration: windows, Damp: *damp,
		BlockSize: *blockSize, Threads: *threads, Log: logf, LayerDone: layers.Set, Progress: writing}
	if err := prune.Prune(m, *out, opt); err != nil {
		return err
	}
	what := fmt.Sprintf("%g sparsity", *sparsity)
	if !pat.IsZero() {
		what = fmt.Sprintf("%s, %g sparsity", pat, pat.Sparsity())
	}
	fmt.Fprintf(os.Stderr, "prune: wrote %s (%s, %s)\n", *out, *method, what)
	return nil
}

func formatFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.4g", x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// countBar is a progress bar over a count of steps (layers) on standard error.
type countBar struct {
	bar *progressbar.ProgressBar
}

// newCountBar returns a bar for total steps; when quiet it draws nothing.
func newCountBar(label string, total int, quiet bool) *countBar {
	if quiet {
		return &countBar{}
	}
	return &countBar{bar: progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(label), progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish())}
}

// Set is told the steps done of total.
func (b *countBar) Set(done, total int) {
	if b.bar != nil {
		b.bar.Set(done)
	}
}

// Finish removes the bar.
func (b *countBar) Finish() {
	if b.bar != nil {
		b.bar.Finish()
		b.bar = nil
	}
}
