package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/bench"
	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/sot"
)

func init() {
	registerBench(benchmark{name: "sot", summary: "Skeleton-of-Thought against the plain answer at the same output length (wall time)", run: benchSoT})
}

func benchSoT(args []string) error {
	fs := newFlags("bench sot", "-m MODEL -f QUESTIONS.jsonl [--questions 5] [--max-tokens 128] [--repeats 3] [--no-constrain] [--json]")
	path := fs.String("f", "", `questions: JSON lines with "turns" (MT-Bench's question.jsonl; the first turn is asked)`)
	count := fs.Int("questions", 5, "how many questions (the file's first)")
	maxTokens := fs.Int("max-tokens", 128, "answer length in tokens, both ways (end-of-sequence ignored)")
	noConstrain := fs.Bool("no-constrain", false, "leave the skeleton unconstrained (a skeleton that does not parse falls back to the plain answer)")
	repeats := fs.Int("repeats", 3, "answers of each question each way, alternately (the fastest counts)")
	asJSON := fs.Bool("json", false, "print the rows as JSON")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" || fs.NArg() > 0 || *count < 1 || *maxTokens < 1 || *repeats < 1 {
		fs.Usage()
		return fmt.Errorf("need -f (and --questions, --max-tokens, --repeats of at least 1)")
	}
	questions, err := readQuestions(*path, *count)
	if err != nil {
		return err
	}
	e, err := ef.openEngine(nil)
	if err != nil {
		return err
	}
	defer e.Close()
	render, closeTemplate, err := sotRender(e)
	if err != nil {
		return err
	}
	defer closeTemplate()
	rows, err := bench.SoT(context.Background(), e, render, questions, bench.SoTOptions{MaxTokens: *maxTokens, Constrain: !*noConstrain, Repeats: *repeats})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(rows)
	}
	bench.WriteSoT(os.Stdout, rows)
	return nil
}

// readQuestions reads the first turn of the first n questions of a JSON-lines file.
func readQuestions(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan() && len(out) < n; line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var q struct {
			Turns []string `json:"turns"`
		}
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil || len(q.Turns) == 0 {
			return nil, fmt.Errorf("%s:%d: want a JSON object with turns", path, line)
		}
		out = append(out, q.Turns[0])
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no questions", path)
	}
	return out, nil
}

// sotRender renders Skeleton-of-Thought prompts with the model's chat template, or, for a
// model without one (a base model), as "role: text" lines ending in "assistant: PREFILL".
func sotRender(e *kvasir.Engine) (func([]sot.Message, string) ([]int32, error), func() error, error) {
	if e.ChatTemplate() == "" {
		return func(msgs []sot.Message, prefill string) ([]int32, error) {
			var b strings.Builder
			for _, m := range msgs {
				b.WriteString(m.Role + ": " + m.Content + "\n")
			}
			b.WriteString("assistant: " + prefill)
			return e.TokenizePrompt(b.String())
		}, func() error { return nil }, nil
	}
	t, closeTemplate, err := chatTemplate(e)
	if err != nil {
		return nil, nil, err
	}
	return func(msgs []sot.Message, prefill string) ([]int32, error) {
		in := chat.Input{AddGenerationPrompt: prefill == ""}
		for _, m := range msgs {
			in.Messages = append(in.Messages, chat.Message{Role: m.Role, Content: m.Content})
		}
		if prefill != "" {
			in.Messages = append(in.Messages, chat.Message{Role: "assistant", Content: prefill})
		}
		return e.RenderChat(t, in, prefill != "")
	}, closeTemplate, nil
}
