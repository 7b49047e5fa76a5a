package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "tokenize", summary: "turn standard input into token ids (or ids back into text)", run: runTokenize})
}

func runTokenize(args []string) error {
	fs := newFlags("tokenize", "-m MODEL [--bos] [--special] [--decode] < input")
	model := fs.String("m", "", "model or vocabulary: GGUF, HF folder or tokenizer.json, hf:ORG/REPO")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	bos := fs.Bool("bos", false, "add BOS/EOS as the vocabulary asks")
	special := fs.Bool("special", false, "parse special-token texts such as <|im_start|> in the input")
	decode := fs.Bool("decode", false, "read token ids (separated by spaces) and print the text they stand for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" && *tok == "" {
		fs.Usage()
		return fmt.Errorf("-m is required")
	}
	t, err := openTokenizer(*model, *tok)
	if err != nil {
		return err
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("reading standard input: %w", err)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if *decode {
		ids, err := parseIDs(string(input), t.NumTokens())
		if err != nil {
			return err
		}
		_, err = out.WriteString(t.Decode(ids, false))
		return err
	}
	ids := t.Encode(string(input), tokenizer.EncodeOptions{AddSpecial: *bos, ParseSpecial: *special})
	for i, id := range ids {
		if i > 0 {
			out.WriteByte(' ')
		}
		out.WriteString(strconv.Itoa(id))
	}
	out.WriteByte('\n')
	return nil
}

// parseIDs reads whitespace-separated token ids and checks each is in the vocabulary.
func parseIDs(s string, vocabSize int) ([]int, error) {
	var ids []int
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token id %q is not a number", f)
		}
		if id < 0 || id >= vocabSize {
			return nil, fmt.Errorf("token id %d is outside the vocabulary (0..%d)", id, vocabSize-1)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
