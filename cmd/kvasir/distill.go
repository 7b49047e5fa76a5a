package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
	"github.com/kvasir-llm/kvasir/internal/train"
)

func init() {
	register(command{name: "distill", summary: "train a small student model on the CPU from a teacher's soft labels (or on hard labels) and write it as GGUF or a Hugging Face folder", run: runDistill})
}

func runDistill(args []string) error {
	fs := newFlags("distill", "--teacher T --student CONFIG|MODEL --data TEXT -o OUT [--steps N] [--top-k K] [--temperature T] [--alpha A] [--hard-labels] [--resume] [--stop-at N]")
	teacherRef := fs.String("teacher", "", "teacher model: any model kvasir loads (.gguf, Hugging Face folder, llama2.c .bin with -z); its tokenizer becomes the student's")
	tokPath := fs.String("z", "", "the teacher's tokenizer file, for a llama2.c .bin teacher")
	studentRef := fs.String("student", "", "a JSON student config (dim, layers, heads, kv_heads, hidden, ctx; optional norm_eps, rope_theta, tied) or a model to continue training")
	dataPath := fs.String("data", "", "training text file")
	out := fs.String("o", "", "output: a .gguf file, or a Hugging Face folder (any other name; it must not exist)")
	steps := fs.Int("steps", 200, "optimizer steps")
	batch := fs.Int("batch", 8, "windows (sequences of ctx tokens) per step")
	ctxFlag := fs.Int("ctx", 0, "training window in tokens (0: the config's ctx; for a model student, its context capped at 256)")
	lr := fs.Float64("lr", 3e-3, "peak learning rate")
	minLR := fs.Float64("min-lr", 0, "learning rate at the end of the cosine decay (0: lr/10)")
	warmup := fs.Int("warmup", 0, "linear warmup steps (0: 5% of --steps)")
	wd := fs.Float64("weight-decay", 0.1, "AdamW's decoupled weight decay (matrices only)")
	clip := fs.Float64("clip", 1, "clip the gradients' global norm to this (0: off)")
	topK := fs.Int("top-k", 32, "teacher logits kept per position; the KL is taken over them, renormalized")
	temp := fs.Float64("temperature", 1, "distillation temperature T (the KL term is scaled by T^2)")
	alpha := fs.Float64("alpha", 0, "weight of the hard-label cross entropy in the loss; the KL term gets 1 - alpha")
	hard := fs.Bool("hard-labels", false, "train on the data's next tokens only (plain cross entropy, alpha = 1): the baseline distillation is compared against; the teacher then gives only the tokenizer")
	seed := fs.Uint64("seed", 1, "seed of the initialization and of each step's choice of windows")
	ckptDir := fs.String("checkpoint-dir", "", "folder for checkpoints and the teacher's cached top-k (default: OUT.ckpt)")
	every := fs.Int("checkpoint-every", 50, "write a checkpoint every N steps (0: never)")
	stopAt := fs.Int("stop-at", 0, "stop once this many steps are done, writing a checkpoint and no model, to --resume later (0: run to --steps)")
	resume := fs.Bool("resume", false, "continue from the checkpoint in --checkpoint-dir (same student, data and options)")
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	quiet := fs.Bool("quiet", false, "no progress bars (the log lines stay)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *teacherRef == "" || *studentRef == "" || *dataPath == "" || *out == "" {
		fs.Usage()
		return fmt.Errorf("--teacher, --student, --data and -o are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *hard {
		*alpha = 1
	}
	switch {
	case *steps <= 0:
		return fmt.Errorf("--steps %d: want at least 1", *steps)
	case *batch <= 0:
		return fmt.Errorf("--batch %d: want at least 1", *batch)
	case *alpha < 0 || *alpha > 1:
		return fmt.Errorf("--alpha %g: want 0..1", *alpha)
	case *alpha < 1 && *topK <= 0:
		return fmt.Errorf("--top-k %d: want at least 1", *topK)
	case *alpha < 1 && *temp <= 0:
		return fmt.Errorf("--temperature %g: want > 0", *temp)
	case *lr <= 0 || *minLR < 0:
		return fmt.Errorf("--lr %g, --min-lr %g: want a positive rate", *lr, *minLR)
	}
	if *ckptDir == "" {
		*ckptDir = strings.TrimSuffix(*out, "/") + ".ckpt"
	}
	if !strings.HasSuffix(*out, ".gguf") {
		if _, err := os.Stat(*out); err == nil {
			return fmt.Errorf("-o %s already exists: a Hugging Face folder is written only where none is", *out)
		}
	}
	text, err := os.ReadFile(*dataPath)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	if strings.TrimSpace(string(text)) == "" {
		return fmt.Errorf("--data %s: the training text is empty", *dataPath)
	}
	if most := threadsPerCPU * runtime.NumCPU(); *threads > most {
		return fmt.Errorf("--threads %d: at most %d (%d per CPU core of the %d here)", *threads, most, threadsPerCPU, runtime.NumCPU())
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "distill: "+format+"\n", a...) }

	// The teacher, through the normal inference path.
	tfm, err := openModel(*teacherRef, *tokPath)
	if err != nil {
		return fmt.Errorf("--teacher: %w", err)
	}
	teacher, err := kvasir.Load(tfm, kvasir.Options{Threads: *threads})
	if err != nil {
		tfm.Close()
		return fmt.Errorf("--teacher: %w", err)
	}
	defer teacher.Close()
	tok := teacher.Tokenizer()
	if tok == nil || tfm.Vocab == nil {
		return fmt.Errorf("--teacher %s has no tokenizer: the student needs one (pass -z for a llama2.c checkpoint)", *teacherRef)
	}
	vocab := tfm.Config.VocabSize

	// The student: a config to initialize, or a model to continue.
	student, err := loadStudent(*studentRef, *ctxFlag, tfm, *seed)
	if err != nil {
		return err
	}
	sc := student.Config
	if tc := tfm.Config.ContextLen; tc > 0 && sc.Ctx > tc && *alpha < 1 {
		return fmt.Errorf("training window of %d tokens exceeds the teacher's context of %d: pass a smaller --ctx", sc.Ctx, tc)
	}
	logf("student: %d layers, dim %d, %d heads (%d kv), hidden %d, vocab %d, tied %v: %.2fM parameters; window %d tokens",
		sc.Layers, sc.Dim, sc.Heads, sc.KVHeads, sc.Hidden, vocab, sc.TiedHead(), float64(student.NumParams())/1e6, sc.Ctx)

	// The data: windows of ctx+1 tokens, each starting with BOS as perplexity's do.
	ids := tok.Encode(string(text), tokenizer.EncodeOptions{AddSpecial: true})
	bos := int32(-1)
	if v := tfm.Vocab; v.AddBOS && v.BOS >= 0 {
		bos = int32(v.BOS)
	}
	data := train.Data{}
	for i := 0; i+sc.Ctx+1 <= len(ids); i += sc.Ctx {
		w := make([]int32, sc.Ctx+1)
		for j := range w {
			w[j] = int32(ids[i+j])
		}
		if bos >= 0 {
			w[0] = bos
		}
		data.Windows = append(data.Windows, w)
	}
	if len(data.Windows) == 0 {
		return fmt.Errorf("--data %s has %d tokens: fewer than one training window of %d", *dataPath, len(ids), sc.Ctx+1)
	}
	logf("data: %d tokens in %d windows; %d steps x %d windows = %d training tokens (%.1f epochs)", len(ids), len(data.Windows),
		*steps, *batch, *steps**batch*sc.Ctx, float64(*steps**batch)/float64(len(data.Windows)))
	if err := os.MkdirAll(*ckptDir, 0o755); err != nil {
		return err
	}
	pool := cpu.NewPool(*threads)
	defer pool.Close()
	if *alpha < 1 {
		tk, err := teacherTopK(teacher, data, *topK, filepath.Join(*ckptDir, "teacher-topk.bin"), *teacherRef, *quiet, logf)
		if err != nil {
			return err
		}
		data.Teacher = &tk
	}

	if *warmup == 0 {
		*warmup = max(1, *steps/20)
	}
	if *minLR == 0 {
		*minLR = *lr / 10
	}
	opt := train.Options{Batch: *batch, Seed: *seed, Loss: train.LossOptions{Alpha: *alpha, Temperature: *temp},
		Opt: train.AdamW{LR: *lr, MinLR: *minLR, Warmup: *warmup, Steps: *steps, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: *wd, Clip: *clip}}
	if *alpha >= 1 {
		opt.Loss.Temperature = 0 // unused: keep checkpoints of hard-label runs independent of it
	}
	tr, err := train.NewTrainer(student, data, opt, pool)
	if err != nil {
		return err
	}
	ckpt := filepath.Join(*ckptDir, "checkpoint.bin")
	if *resume {
		if err := tr.LoadCheckpoint(ckpt); err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
		logf("resumed from %s at step %d", ckpt, tr.Step)
	}
	end := *steps
	if *stopAt > 0 {
		end = min(*stopAt, end)
	}
	if err := trainLoop(tr, end, *steps, *every, ckpt, *quiet, logf); err != nil {
		return err
	}
	if tr.Step < *steps {
		if err := tr.SaveCheckpoint(ckpt); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		logf("stopped at step %d of %d: checkpoint in %s; continue with --resume", tr.Step, *steps, ckpt)
		return nil
	}
	name := strings.TrimSuffix(filepath.Base(*out), ".gguf")
	if err := student.Write(*out, name, tfm.Vocab, tfm.ChatTemplate, nil); err != nil {
		return err
	}
	logf("wrote %s", *out)
	return nil
}

// loadStudent returns the model to train: from a JSON config (a fresh initialization with
// the teacher's vocabulary) or from a model file, whose vocabulary must be the teacher's.
func loadStudent(ref string, ctx int, teacher *format.Model, seed uint64) (*train.Model, error) {
	vocab := teacher.Config.VocabSize
	if strings.HasSuffix(ref, ".json") {
		f, err := os.Open(ref)
		if err != nil {
			return nil, fmt.Errorf("--student: %w", err)
		}
		defer f.Close()
		c, err := train.ParseConfig(f)
		if err != nil {
			return nil, fmt.Errorf("--student %s: %w", ref, err)
		}
		c.Vocab = vocab
		if ctx > 0 {
			c.Ctx = ctx
		}
		return train.NewModel(c, seed)
	}
	fm, err := openModel(ref, "")
	if err != nil {
		return nil, fmt.Errorf("--student: %w", err)
	}
	defer fm.Close()
	if fm.Config.VocabSize != vocab {
		return nil, fmt.Errorf("--student %s: vocabulary mismatch: the student has %d tokens, the teacher %d", ref, fm.Config.VocabSize, vocab)
	}
	if sv, tv := fm.Vocab, teacher.Vocab; sv != nil && tv != nil {
		for i := range min(len(sv.Tokens), len(tv.Tokens)) {
			if sv.Tokens[i] != tv.Tokens[i] {
				return nil, fmt.Errorf("--student %s: vocabulary mismatch: token %d is %q in the student, %q in the teacher", ref, i, sv.Tokens[i], tv.Tokens[i])
			}
		}
	}
	if ctx == 0 {
		ctx = min(max(fm.Config.ContextLen, 2), 256)
	}
	return train.FromFormat(fm, ctx)
}

// teacherTopK runs the teacher over every training window once and keeps its top k logits
// per position, cached in path (keyed by the teacher, the data and k) for later runs.
func teacherTopK(teacher *kvasir.Loaded, data train.Data, k int, path, ref string, quiet bool, logf func(string, ...any)) (train.TopK, error) {
	vocab := teacher.Model().Config().VocabSize
	k = min(k, vocab)
	ctx := len(data.Windows[0]) - 1
	key := fmt.Sprintf("teacher=%s bytes=%d data=%016x windows=%d ctx=%d k=%d", ref, teacher.File().Bytes(), data.Hash(), len(data.Windows), ctx, k)
	if tk, ok, err := train.LoadTopK(path, key); err != nil {
		return train.TopK{}, err
	} else if ok {
		logf("teacher: top-%d logits read from %s", k, path)
		return tk, nil
	}
	s, err := teacher.Model().NewSession(ctx)
	if err != nil {
		return train.TopK{}, fmt.Errorf("teacher: %w", err)
	}
	all := train.TopK{K: k}
	var bar *progressbar.ProgressBar
	if !quiet {
		bar = progressbar.NewOptions(len(data.Windows), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("teacher top-k"), progressbar.OptionShowIts(), progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	t0 := time.Now()
	for i, w := range data.Windows {
		s.Reset()
		logits, err := s.Score(w[:ctx])
		if err != nil {
			return train.TopK{}, fmt.Errorf("teacher: window %d: %w", i, err)
		}
		tk := train.TopKOf(logits, vocab, k)
		all.IDs = append(all.IDs, tk.IDs...)
		all.Logits = append(all.Logits, tk.Logits...)
		if bar != nil {
			bar.Add(1)
		}
	}
	if bar != nil {
		bar.Finish()
	}
	logf("teacher: top-%d logits of %d positions in %.1f s", k, len(data.Windows)*ctx, time.Since(t0).Seconds())
	if err := train.SaveTopK(path, key, all); err != nil {
		return train.TopK{}, err
	}
	return all, nil
}

// trainLoop runs the trainer to step end of a run of steps, checkpointing every `every`
// steps, with a progress bar showing the loss and the tokens per second (or, when quiet, a
// log line at each checkpoint).
func trainLoop(tr *train.Trainer, end, steps, every int, ckpt string, quiet bool, logf func(string, ...any)) error {
	var bar *progressbar.ProgressBar
	if !quiet {
		bar = progressbar.NewOptions(steps, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetWidth(20), progressbar.OptionClearOnFinish())
		bar.Set(tr.Step)
	}
	t0, tokens := time.Now(), 0
	var last train.StepStats
	for tr.Step < end {
		last = tr.TrainStep()
		tokens += last.Tokens
		tps := float64(tokens) / time.Since(t0).Seconds()
		if bar != nil {
			bar.Describe(fmt.Sprintf("step %d/%d loss %.4f ce %.4f kl %.4f lr %.2e %.0f tok/s", tr.Step, steps, last.Loss, last.CE, last.KL, last.LR, tps))
			bar.Set(tr.Step)
		}
		if every > 0 && (tr.Step%every == 0 || tr.Step == steps) {
			if err := tr.SaveCheckpoint(ckpt); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			if bar == nil {
				logf("step %d/%d: loss %.4f, cross entropy %.4f, KL %.4f, lr %.2e, %.0f tokens/s; checkpoint written", tr.Step, steps, last.Loss, last.CE, last.KL, last.LR, tps)
			}
		}
	}
	if bar != nil {
		bar.Finish()
	}
	if tokens > 0 {
		logf("trained to step %d: loss %.4f, cross entropy %.4f, KL %.4f; %d tokens in %.1f s (%.0f tokens/s)",
			tr.Step, last.Loss, last.CE, last.KL, tokens, time.Since(t0).Seconds(), float64(tokens)/time.Since(t0).Seconds())
	}
	return nil
}
