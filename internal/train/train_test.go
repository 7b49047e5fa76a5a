package train

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

func tinyConfig(vocab int) Config {
	c, err := ParseConfigBytes([]byte(`{"dim":16,"layers":2,"heads":4,"kv_heads":2,"hidden":32,"ctx":8}`))
	if err != nil {
		panic(err)
	}
	c.Vocab = vocab
	return c
}

// patternData is a text that is easy to learn: windows counting up from their own start.
func patternData(vocab, windows, ctx int) Data {
	var d Data
	for w := 0; w < windows; w++ {
		win := make([]int32, ctx+1)
		for i := range win {
			win[i] = int32((w*5 + i) % vocab)
		}
		d.Windows = append(d.Windows, win)
	}
	return d
}

func trainOptions(steps int, alpha float64) Options {
	return Options{Batch: 4, Seed: 3, Loss: LossOptions{Alpha: alpha, Temperature: 2},
		Opt: AdamW{LR: 1e-2, MinLR: 1e-3, Warmup: 3, Steps: steps, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Clip: 1}}
}

func TestTrainingLowersTheLoss(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	c := tinyConfig(20)
	m, err := NewModel(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(m, patternData(c.Vocab, 16, c.Ctx), trainOptions(60, 1), p)
	if err != nil {
		t.Fatal(err)
	}
	first := tr.TrainStep()
	var last StepStats
	for tr.Step < 60 {
		last = tr.TrainStep()
	}
	if math.Abs(first.CE-math.Log(20)) > 0.2 {
		t.Errorf("first loss %.3f, want about ln(vocab) = %.3f from a small initialization", first.CE, math.Log(20))
	}
	if last.CE > first.CE/2 {
		t.Fatalf("cross entropy %.3f after 60 steps, from %.3f: want it at least halved", last.CE, first.CE)
	}
}

// TestDistillationLowersKL trains on a teacher's soft labels alone: the KL must fall.
func TestDistillationLowersKL(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	c := tinyConfig(20)
	data := patternData(c.Vocab, 16, c.Ctx)
	teacher, _ := NewModel(c, 9)
	tt, err := NewTrainer(teacher, data, trainOptions(100, 1), p)
	if err != nil {
		t.Fatal(err)
	}
	for tt.Step < 100 {
		tt.TrainStep()
	}
	var inputs []int32
	for _, w := range data.Windows {
		inputs = append(inputs, w[:c.Ctx]...)
	}
	tp := teacher.forward(p, inputs, len(data.Windows), c.Ctx)
	tk := TopKOf(tp.logits, c.Vocab, 5)
	data.Teacher = &tk
	m, _ := NewModel(c, 1)
	tr, err := NewTrainer(m, data, trainOptions(60, 0), p)
	if err != nil {
		t.Fatal(err)
	}
	first := tr.TrainStep()
	var last StepStats
	for tr.Step < 60 {
		last = tr.TrainStep()
	}
	if last.KL > first.KL/2 {
		t.Fatalf("KL %.4f after 60 steps, from %.4f: want it at least halved", last.KL, first.KL)
	}
}

func TestResumeReproducesTheRun(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	c := tinyConfig(20)
	data := patternData(c.Vocab, 16, c.Ctx)
	tk := TopKOf(randVec(rand.New(rand.NewPCG(1, 1)), len(data.Windows)*c.Ctx*c.Vocab, 2), c.Vocab, 4)
	data.Teacher = &tk
	opt := trainOptions(6, 0.5)
	run := func() *Trainer {
		m, _ := NewModel(c, 1)
		tr, err := NewTrainer(m, data, opt, p)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	straight := run()
	for range 6 {
		straight.TrainStep()
	}
	ckpt := filepath.Join(t.TempDir(), "ckpt.bin")
	first := run()
	for range 3 {
		first.TrainStep()
	}
	if err := first.SaveCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	resumed := run()
	if err := resumed.LoadCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if resumed.Step != 3 {
		t.Fatalf("resumed at step %d, want 3", resumed.Step)
	}
	for resumed.Step < 6 {
		resumed.TrainStep()
	}
	a, b := straight.Model.Params(), resumed.Model.Params()
	for i := range a {
		for j := range a[i].W {
			if math.Float32bits(a[i].W[j]) != math.Float32bits(b[i].W[j]) {
				t.Fatalf("%s[%d]: %v uninterrupted, %v resumed", a[i].Name, j, a[i].W[j], b[i].W[j])
			}
		}
	}
	// A truncated checkpoint is refused and changes nothing.
	whole, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.bin")
	os.WriteFile(cut, whole[:len(whole)-8], 0o644)
	before := append([]float32(nil), resumed.Model.Embed...)
	if err := resumed.LoadCheckpoint(cut); err == nil {
		t.Fatal("a truncated checkpoint loaded")
	}
	for i, v := range before {
		if resumed.Model.Embed[i] != v || resumed.Step != 6 {
			t.Fatal("a refused checkpoint changed the trainer")
		}
	}
	// A checkpoint of other options or data is refused.
	other := opt
	other.Opt.LR *= 2
	m, _ := NewModel(c, 1)
	tr, _ := NewTrainer(m, data, other, p)
	if err := tr.LoadCheckpoint(ckpt); err == nil || !strings.Contains(err.Error(), "training options") {
		t.Fatalf("resuming with another learning rate: %v", err)
	}
	data2 := patternData(c.Vocab, 16, c.Ctx)
	data2.Windows[0][0] ^= 1
	data2.Teacher = &tk
	tr, _ = NewTrainer(m, data2, opt, p)
	if err := tr.LoadCheckpoint(ckpt); err == nil || !strings.Contains(err.Error(), "data") {
		t.Fatalf("resuming on other data: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	if _, err := ParseConfigBytes([]byte(`{"dim":16,"layers":2,"heads":4,"kv_head":2,"hidden":32,"ctx":8}`)); err == nil || !strings.Contains(err.Error(), "kv_head") {
		t.Fatalf("unknown key: %v", err)
	}
	c, err := ParseConfigBytes([]byte(`{"dim":18,"layers":2,"heads":4,"kv_heads":2,"hidden":32,"ctx":8}`))
	if err != nil {
		t.Fatal(err)
	}
	c.Vocab = 10
	if err := c.Validate(); err == nil {
		t.Fatal("dim 18 with 4 heads accepted")
	}
	c.Dim, c.KVHeads = 16, 3
	if err := c.Validate(); err == nil {
		t.Fatal("4 heads over 3 kv heads accepted")
	}
}

func TestTopKOf(t *testing.T) {
	row := []float32{0.5, 3, -1, 3, 2, 7, 0}
	tk := TopKOf(row, len(row), 3)
	want := []int32{5, 1, 3}
	for i, id := range want {
		if tk.IDs[i] != id || tk.Logits[i] != row[id] {
			t.Fatalf("top 3 of %v: %v %v, want ids %v", row, tk.IDs, tk.Logits, want)
		}
	}
}

// TestWrittenModelRunsInKvasir writes a trained model as GGUF and as a Hugging Face
// folder and checks that kvasir's reference forward pass, reading those files, gives the
// logits this package's forward pass computes; and that both read back as the same weights.
func TestWrittenModelRunsInKvasir(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	vocab, err := synth.ByteVocab(300)
	if err != nil {
		t.Fatal(err)
	}
	for _, tied := range []bool{true, false} {
		c := tinyConfig(len(vocab.Tokens))
		c.Tied = &tied
		m, _ := NewModel(c, 5)
		tr, err := NewTrainer(m, patternData(c.Vocab, 8, c.Ctx), trainOptions(5, 1), p)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			tr.TrainStep()
		}
		tokens := []int32{1, 7, 42, 9, 250, 3, 3, 100}
		want := m.forward(p, tokens, 1, len(tokens)).logits
		dir := t.TempDir()
		for _, out := range []string{filepath.Join(dir, "s.gguf"), filepath.Join(dir, "hf")} {
			if err := m.Write(out, "student", vocab, "", nil); err != nil {
				t.Fatal(err)
			}
			fm, err := format.Open(out, format.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := model.NewReference(fm)
			if err != nil {
				t.Fatal(err)
			}
			for pos, tok := range tokens {
				got, err := ref.Forward(int(tok))
				if err != nil {
					t.Fatal(err)
				}
				for i, g := range got {
					if w := want[pos*c.Vocab+i]; math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
						t.Fatalf("%s tied=%v: position %d logit %d: kvasir %v, trainer %v", out, tied, pos, i, g, w)
					}
				}
			}
			back, err := FromFormat(fm, c.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			a, b := m.Params(), back.Params()
			if len(a) != len(b) {
				t.Fatalf("%s: %d tensors read back, wrote %d", out, len(b), len(a))
			}
			for i := range a {
				for j := range a[i].W {
					if a[i].W[j] != b[i].W[j] {
						t.Fatalf("%s: %s[%d] read back as %v, wrote %v", out, a[i].Name, j, b[i].W[j], a[i].W[j])
					}
				}
			}
			fm.Close()
		}
		// A folder is not written over.
		if err := m.Write(filepath.Join(dir, "hf"), "student", vocab, "", nil); err == nil {
			t.Fatal("wrote over an existing folder")
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Fatalf("temporary %s left behind", e.Name())
			}
		}
	}
}

func TestTopKCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topk.bin")
	tk := TopK{K: 2, IDs: []int32{3, 1, 0, 2}, Logits: []float32{2.5, 1, -1, -3}}
	if err := SaveTopK(path, "key A", tk); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadTopK(path, "key A")
	if err != nil || !ok || got.K != 2 || len(got.IDs) != 4 || got.IDs[0] != 3 || got.Logits[3] != -3 {
		t.Fatalf("read back %+v %v %v", got, ok, err)
	}
	if _, ok, err := LoadTopK(path, "key B"); ok || err != nil {
		t.Fatalf("another key: ok %v, err %v", ok, err)
	}
	os.WriteFile(path, []byte("garbage"), 0o644)
	if _, _, err := LoadTopK(path, "key A"); err == nil {
		t.Fatal("garbage accepted")
	}
}
