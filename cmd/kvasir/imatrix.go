package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/imatrix"
)

func init() {
	register(command{name: "imatrix", summary: "compute an importance matrix (llama.cpp's .dat format) from a model's activations on a text", run: runImatrix})
}

// imatrixGroup is how many windows go through the model together: the activations of one
// group are held at a time.
const imatrixGroup = 8

func runImatrix(args []string) error {
	fs := newFlags("imatrix", "-m MODEL -f TEXT -o FILE [--ctx N] [--chunks N]")
	in := fs.String("m", "", "model: a .gguf file, a Hugging Face folder or a llama2.c .bin")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	text := fs.String("f", "", "calibration text file")
	out := fs.String("o", "imatrix.dat", "output file (llama-imatrix's legacy .dat format)")
	ctx := fs.Int("ctx", 512, "window length in tokens, each window starting with BOS (capped by the model's context)")
	chunks := fs.Int("chunks", 0, "most windows to process (0: all of the text)")
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *text == "" {
		fs.Usage()
		return fmt.Errorf("-m and -f are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *chunks < 0 {
		return fmt.Errorf("--chunks %d: want 0 (all) or more", *chunks)
	}
	m, err := openModel(*in, *tok)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := calibrate.Check(m.Config); err != nil {
		return err
	}
	windows, err := calibrationWindows(m, *text, *ctx, 0)
	if err != nil {
		return err
	}
	if *chunks > 0 && len(windows) > *chunks {
		windows = windows[:*chunks]
	}
	n := *threads
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := cpu.NewPool(n)
	defer p.Close()
	col := imatrix.NewCollector()
	for g := 0; g < len(windows); g += imatrixGroup {
		seqs := windows[g:min(g+imatrixGroup, len(windows))]
		_, err := calibrate.Run(m, seqs, p,
			func(l int) (*calibrate.Layer, error) { return calibrate.LoadLayer(m, l) },
			func(s *calibrate.Stage) error {
				for _, w := range s.Linear {
					if err := col.Add(w.Name, s.Input.Data, s.Input.Cols); err != nil {
						return err
					}
				}
				return nil
			},
			func(int, *calibrate.Layer) error { return nil })
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "imatrix: %d/%d chunks\n", g+len(seqs), len(windows))
	}
	ctxLen := len(windows[0])
	if err := imatrix.Write(*out, col.File(ctxLen, len(windows), *text)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "imatrix: wrote %s (%d chunks of %d tokens)\n", *out, len(windows), ctxLen)
	return nil
}
