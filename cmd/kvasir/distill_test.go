package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

const tinyStudent = `{"dim":16,"layers":1,"heads":2,"kv_heads":1,"hidden":32,"ctx":32}`

// distillFixture writes a student config and a few KB of TinyStories into dir.
func distillFixture(t *testing.T, dir string) (teacher, config, data string) {
	teacher = testdata.Path(t, "models/stories260K/stories260K.gguf")
	text, err := os.ReadFile(testdata.Path(t, "corpus/tinystories_excerpt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	config, data = filepath.Join(dir, "student.json"), filepath.Join(dir, "data.txt")
	if err := os.WriteFile(config, []byte(tinyStudent), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, text[:12000], 0o644); err != nil {
		t.Fatal(err)
	}
	return teacher, config, data
}

func TestDistillRefuses(t *testing.T) {
	dir := t.TempDir()
	teacher, config, data := distillFixture(t, dir)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty.txt", "  \n")
	short := write("short.txt", "Once upon a time")
	badKey := write("badkey.json", `{"dim":16,"layers":1,"heads":2,"kv_head":1,"hidden":32,"ctx":32}`)
	badShape := write("badshape.json", `{"dim":18,"layers":1,"heads":4,"kv_heads":1,"hidden":32,"ctx":32}`)
	long := write("long.json", `{"dim":16,"layers":1,"heads":2,"kv_heads":1,"hidden":32,"ctx":512}`)
	notModel := write("teacher.gguf", "not a model")
	otherVocab := testdata.Path(t, "models/tiny-random/llama-2-tiny-random.gguf")
	out := filepath.Join(dir, "out.gguf")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--teacher", teacher, "--student", config, "--data", empty}, "empty"},
		{[]string{"--teacher", teacher, "--student", config, "--data", short}, "fewer than one training window"},
		{[]string{"--teacher", teacher, "--student", badKey, "--data", data}, `unknown field "kv_head"`},
		{[]string{"--teacher", teacher, "--student", badShape, "--data", data}, "not a multiple of heads"},
		{[]string{"--teacher", teacher, "--student", long, "--data", data}, "exceeds the teacher's context"},
		{[]string{"--teacher", teacher, "--student", otherVocab, "--data", data}, "vocabulary mismatch"},
		{[]string{"--teacher", notModel, "--student", config, "--data", data}, "--teacher"},
		{[]string{"--teacher", teacher, "--student", config, "--data", data, "--alpha", "1.5"}, "--alpha"},
		{[]string{"--teacher", teacher, "--student", config, "--data", data, "--steps", "-1"}, "--steps"},
		{[]string{"--teacher", teacher, "--data", data}, "required"},
		{[]string{"--teacher", teacher, "--student", config, "--data", data, "--threads", "100000"}, "--threads 100000"},
		{[]string{"--teacher", teacher, "--student", config, "--data", data, "--lr", "NaN"}, "--lr NaN"},
	}
	for _, c := range cases {
		runWithIO(t, "", func() error {
			err := runDistill(append([]string{"-o", out, "--quiet"}, c.args...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
			}
			return nil
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an output was written")
	}
	if _, err := os.Stat(out + ".ckpt"); err == nil {
		t.Error("a checkpoint folder was made for input that was refused")
	}
}

// TestDistillResumeWritesTheSameModel distills a tiny student from stories260K in one
// run, and in two (stopped at step 3, then resumed); both write the same bytes, a GGUF the
// normal inference path loads with the teacher's vocabulary.
func TestDistillResumeWritesTheSameModel(t *testing.T) {
	dir := t.TempDir()
	teacher, config, data := distillFixture(t, dir)
	args := func(out string, extra ...string) []string {
		return append([]string{"--teacher", teacher, "--student", config, "--data", data, "-o", out,
			"--steps", "6", "--batch", "2", "--checkpoint-every", "2", "--top-k", "8", "--alpha", "0.2", "--quiet", "--threads", "2"}, extra...)
	}
	a := filepath.Join(dir, "a", "s.gguf")
	b := filepath.Join(dir, "b", "s.gguf")
	os.MkdirAll(filepath.Dir(a), 0o755)
	os.MkdirAll(filepath.Dir(b), 0o755)
	var log string
	_, log = runWithIO(t, "", func() error { return runDistill(args(a)) })
	if !strings.Contains(log, "trained to step 6") {
		t.Fatalf("no training summary:\n%s", log)
	}
	runWithIO(t, "", func() error { return runDistill(args(b, "--stop-at", "3")) })
	if _, err := os.Stat(b); err == nil {
		t.Fatal("a run stopped at step 3 wrote the model")
	}
	_, log = runWithIO(t, "", func() error { return runDistill(args(b, "--resume")) })
	if !strings.Contains(log, "resumed from") || !strings.Contains(log, "at step 3") || !strings.Contains(log, "top-8 logits read from") {
		t.Fatalf("the second run did not resume at step 3 with the cached teacher logits:\n%s", log)
	}
	ba, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ba, bb) {
		t.Fatal("the resumed run wrote another model than the uninterrupted one")
	}
	fm, err := format.Open(a, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := format.Open(teacher, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	if fm.Config.Dim != 16 || fm.Config.Layers != 1 || fm.Vocab == nil || len(fm.Vocab.Tokens) != len(tf.Vocab.Tokens) || fm.Vocab.Tokens[300] != tf.Vocab.Tokens[300] {
		t.Fatalf("student: config %+v, vocabulary not the teacher's", fm.Config)
	}
	l, err := kvasir.Load(fm, kvasir.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := l.Model().NewSession(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Score([]int32{1, 400, 20, 7}); err != nil {
		t.Fatal(err)
	}
	// The written student continues as --student MODEL, into a Hugging Face folder.
	hf := filepath.Join(dir, "c", "hf")
	_, log = runWithIO(t, "", func() error {
		return runDistill([]string{"--teacher", teacher, "--student", a, "--data", data, "-o", hf, "--steps", "2", "--batch", "2", "--ctx", "16", "--quiet"})
	})
	if !strings.Contains(log, "trained to step 2") {
		t.Fatalf("continuing from %s:\n%s", a, log)
	}
	hm, err := format.Open(hf, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hm.Close()
	if hm.Config.Dim != 16 || hm.Config.ContextLen != 16 || hm.Vocab == nil || len(hm.Vocab.Tokens) != len(tf.Vocab.Tokens) {
		t.Fatalf("continued student: %+v", hm.Config)
	}
}
