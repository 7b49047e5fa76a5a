package main

import (
	"crypto/md5"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// sessionGreedy generates n tokens greedily after prompt with a plain loop over
// model.Session (no engine, no scheduler) on the stories260K checkpoint, and returns the
// text kvasir run prints: the prompt echoed, then the continuation, up to an
// end-of-generation token.
func sessionGreedy(t *testing.T, bin, tokPath, prompt string, n int) string {
	t.Helper()
	fm, err := format.Open(bin, format.Options{Tokenizer: tokPath})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvasir.Load(fm, kvasir.Options{Threads: 2})
	if err != nil {
		fm.Close()
		t.Fatal(err)
	}
	defer l.Close()
	tok := l.Tokenizer()
	var ids []int32
	for _, id := range tok.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true}) {
		ids = append(ids, int32(id))
	}
	s, err := l.Model().NewSession(len(ids) + n)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := s.Prefill(ids)
	if err != nil {
		t.Fatal(err)
	}
	detok := tokenizer.NewDetokenizer(tok, true)
	var out strings.Builder
	for _, id := range ids {
		out.WriteString(detok.Add(int(id)))
	}
	next := int32(sample.Greedy(logits))
	for i := 0; i < n && !tok.IsEOG(int(next)); i++ {
		out.WriteString(detok.Add(int(next)))
		if i == n-1 {
			break
		}
		if next, err = s.StepGreedy(next); err != nil {
			t.Fatal(err)
		}
	}
	out.WriteString(detok.Flush())
	return out.String() + "\n"
}

// TestRunEngineMatchesSession: `kvasir run` at temperature 0, which goes through the
// engine, prints what a plain greedy loop over model.Session gives, prompt echo included.
func TestRunEngineMatchesSession(t *testing.T) {
	bin, tok, _ := storiesRun(t)
	for _, n := range []int{1, 7, 200} {
		want := sessionGreedy(t, bin, tok, "Once upon a time", n)
		got := captureStdout(t, func() error {
			return runRun([]string{"-m", bin, "-z", tok, "--temperature", "0", "-n", strconv.Itoa(n), "-p", "Once upon a time", "--threads", "2"})
		})
		if got != want {
			t.Errorf("-n %d: kvasir run printed\n%q\na greedy loop over model.Session gives\n%q", n, got, want)
		}
	}
}

// TestRunDefaultModelPinned: the greedy output of the built-in default model, plain and
// with --chat, is byte for byte what kvasir printed before run went through the engine
// (md5 of the standard output of a19c639's binary).
func TestRunDefaultModelPinned(t *testing.T) {
	for _, tc := range []struct {
		args []string
		md5  string
	}{
		{[]string{"--temperature", "0", "-n", "64", "-p", "Hello world"}, "96cde5429d5b3c48664987b8eeccc2ff"},
		{[]string{"--temperature", "0", "-n", "64", "--chat", "-p", "Hello world"}, "680c5edf59a332484b50bc56ef53680b"},
	} {
		out := captureStdout(t, func() error { return runRun(tc.args) })
		sum := md5.Sum([]byte(out))
		if got := hex.EncodeToString(sum[:]); got != tc.md5 {
			t.Errorf("kvasir run %s: md5 %s, want %s; printed %q", strings.Join(tc.args, " "), got, tc.md5, out)
		}
	}
}

// tinyChatModel writes a 2-layer synthesized model with a 320-token byte vocabulary and
// the ChatML template to a GGUF file and returns its path.
func tinyChatModel(t *testing.T) string {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 64, 4, 2, 16, 16, 128, 512
	shape.Config = c
	fm, err := synth.Model(shape, quant.F32, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	fm.ChatTemplate = defaultChatTemplate
	path := filepath.Join(t.TempDir(), "tiny-chat.gguf")
	if err := format.Convert(fm, path, format.ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

// runWithIO runs fn with standard input reading in and returns what it wrote to standard
// output and standard error.
func runWithIO(t *testing.T, in string, fn func() error) (stdout, stderr string) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		io.WriteString(inW, in)
		inW.Close()
	}()
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(errR)
		done <- string(b)
	}()
	oldIn, oldErr := os.Stdin, os.Stderr
	os.Stdin, os.Stderr = inR, errW
	defer func() { os.Stdin, os.Stderr = oldIn, oldErr }()
	stdout = captureStdout(t, fn)
	os.Stdin, os.Stderr = oldIn, oldErr
	errW.Close()
	return stdout, <-done
}

// TestChatReusesPrefix: `kvasir chat` keeps one engine for the conversation, and the
// prefix cache holds the first turn's keys and values, so that the second turn prefills
// fewer tokens than the first turn's prompt and reply together.
func TestChatReusesPrefix(t *testing.T) {
	path := tinyChatModel(t)
	stdout, stderr := runWithIO(t, "Tell me a long story about the sea and a boat\nAnd then?\n", func() error {
		return runChat([]string{"-m", path, "--temperature", "0", "-n", "24", "--threads", "2"})
	})
	turns := regexp.MustCompile(`\[(\d+) new prompt tokens at [0-9.]+ tokens/s, (\d+) reply tokens at [0-9.]+ tokens/s\]`).FindAllStringSubmatch(stderr, -1)
	if len(turns) != 2 || strings.Count(stdout, "\n") != 2 {
		t.Fatalf("want two turns; printed\n%s\nlogged\n%s", stdout, stderr)
	}
	num := func(s string) int {
		n, _ := strconv.Atoi(s)
		return n
	}
	prompt1, reply1, prompt2 := num(turns[0][1]), num(turns[0][2]), num(turns[1][1])
	t.Logf("turn 1: %d prompt tokens, %d reply tokens; turn 2: %d new prompt tokens", prompt1, reply1, prompt2)
	if prompt2 <= 0 || prompt2 >= prompt1+reply1 {
		t.Errorf("turn 2 prefilled %d tokens: the first turn's %d + %d were not reused", prompt2, prompt1, reply1)
	}
}
