package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/kvasir-llm/kvasir/internal/hub"
)

func init() {
	register(command{name: "pull", summary: "download a model from the Hugging Face hub into the HF cache", run: runPull})
}

// runPull implements "kvasir pull".
func runPull(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return pull(ctx, args, hub.OptionsFromEnv(), os.Stdout)
}

// pull downloads each reference in args with the settings in opt (adjusted by the flags)
// and prints the local path of each on stdout, one a line.
func pull(ctx context.Context, args []string, opt hub.Options, stdout io.Writer) error {
	fs := newFlags("pull", "[flags] hf:ORG/REPO[@REVISION][/FILE] ...")
	revision := fs.String("revision", "", "branch, tag or commit to download (default main; the @REVISION of a reference wins)")
	cacheDir := fs.String("cache-dir", "", "hub cache folder (default $HF_HUB_CACHE or $HF_HOME/hub)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "Usage: kvasir pull [flags] hf:ORG/REPO[@REVISION][/FILE] ...")
		fmt.Fprintln(w, "\nDownloads into the Hugging Face cache (shared with huggingface_hub) and prints the local")
		fmt.Fprintln(w, "path: the file for a GGUF model, the snapshot folder for a safetensors model. Without")
		fmt.Fprintln(w, "FILE it takes the safetensors weights with config and tokenizer, or the repository's only")
		fmt.Fprintln(w, "GGUF model. The \"hf:\" prefix may be left out. Environment: HF_TOKEN (gated or private")
		fmt.Fprintln(w, "repositories), HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE=1.")
		fmt.Fprintln(w, "\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("missing a model reference such as hf:ORG/REPO")
	}
	if *revision != "" {
		opt.Revision = *revision
	}
	if *cacheDir != "" {
		opt.CacheDir = *cacheDir
	}
	for _, arg := range fs.Args() {
		s := arg
		if !hub.IsRef(s) {
			s = hub.Prefix + s
		}
		ref, err := hub.ParseRef(s)
		if err != nil {
			return err
		}
		path, err := hub.Download(ctx, ref, opt)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}
