package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/structured"
	"github.com/kvasir-llm/kvasir/internal/structured/jsonschema"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	registerBench(benchmark{name: "grammar", summary: "structured output: grammar compile time and per-token mask time", run: benchGrammar})
}

// grammarFrontEnds maps a grammar file's extension to the front end that reads it.
var grammarFrontEnds = map[string]structured.FrontEnd{
	".gbnf": func(src []byte) (*structured.Grammar, error) { return structured.ParseGBNF(string(src)) },
	".ebnf": func(src []byte) (*structured.Grammar, error) { return structured.ParseEBNF(string(src)) },
	".lark": func(src []byte) (*structured.Grammar, error) { return structured.ParseEBNF(string(src)) },
	".regex": func(src []byte) (*structured.Grammar, error) {
		return structured.ParseRegex(strings.TrimRight(string(src), "\r\n"))
	},
	// A JSON Schema, compiled as response_format json_schema compiles it (compact JSON).
	".json": jsonschema.FrontEnd(jsonschema.Options{}),
}

// grammarResult is one grammar file's figures.
type grammarResult struct {
	File      string  `json:"file"`
	Error     string  `json:"error,omitempty"`
	CompileMS float64 `json:"compile_ms"` // median over --compiles compiles
	Masks     int     `json:"masks"`
	MeanUS    float64 `json:"mask_mean_us"`
	P50US     float64 `json:"mask_p50_us"`
	P99US     float64 `json:"mask_p99_us"`
	Runs      int     `json:"runs"`
	Complete  int     `json:"complete"` // runs that ended with a complete output
}

func benchGrammar(args []string) error {
	fs := newFlags("bench grammar", "(-m MODEL | --tokenizer PATH) [--runs N] [--max-tokens N] [--json] FILE|DIR...")
	model := fs.String("m", "", "model whose tokenizer to use: GGUF, HF folder, hf:ORG/REPO")
	tokPath := fs.String("tokenizer", "", "tokenizer: tokenizer.json, vocab GGUF, or a folder holding tokenizer.json or encoder.json + vocab.bpe (Llama 3)")
	runs := fs.Int("runs", 20, "simulated generations per grammar")
	maxTokens := fs.Int("max-tokens", 256, "tokens per generation at most")
	compiles := fs.Int("compiles", 5, "compiles per grammar to time (the median is reported)")
	seed := fs.Uint64("seed", 1, "random seed of the simulated generations")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*model == "") == (*tokPath == "") {
		fs.Usage()
		return fmt.Errorf("give exactly one of -m and --tokenizer")
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("name grammar files or folders (extensions: %s)", strings.Join(frontEndExts(), ", "))
	}
	if *runs < 1 || *maxTokens < 1 || *compiles < 1 {
		return fmt.Errorf("--runs, --max-tokens and --compiles must be positive")
	}
	files, err := grammarFiles(fs.Args())
	if err != nil {
		return err
	}
	var tok *tokenizer.Tokenizer
	if *model != "" {
		tok, err = openTokenizer(*model, "")
	} else {
		tok, err = openGrammarTokenizer(*tokPath)
	}
	if err != nil {
		return err
	}
	trie, err := structured.NewTokenTrie(tok)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(*seed, 0x9e3779b97f4a7c15))
	var results []grammarResult
	var allMasks []time.Duration
	var compileTimes []float64
	if !*asJSON {
		fmt.Printf("vocabulary: %d tokens, trie of %d nodes\n", tok.NumTokens(), trie.NumNodes())
		fmt.Printf("%-28s %10s %7s %10s %10s %10s %9s\n", "grammar", "compile", "masks", "mean", "p50", "p99", "complete")
	}
	for _, f := range files {
		r, masks := benchGrammarFile(f, tok, trie, rng, *runs, *maxTokens, *compiles)
		if !*asJSON {
			printGrammarRow(r)
		}
		results = append(results, r)
		allMasks = append(allMasks, masks...)
		if r.Error == "" {
			compileTimes = append(compileTimes, r.CompileMS)
		}
	}
	total := grammarResult{File: "(all)", Masks: len(allMasks)}
	total.MeanUS, total.P50US, total.P99US = durationStats(allMasks)
	slices.Sort(compileTimes)
	compileP50, compileP99 := percentile(compileTimes, 50), percentile(compileTimes, 99)
	for _, r := range results {
		total.Runs += r.Runs
		total.Complete += r.Complete
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{
			"tokenizer_tokens": tok.NumTokens(), "grammars": results, "all": total,
			"compile_p50_ms": compileP50, "compile_p99_ms": compileP99})
	}
	printGrammarRow(total)
	fmt.Printf("compile over %d grammars: p50 %.2fms, p99 %.2fms\n", len(compileTimes), compileP50, compileP99)
	return nil
}

// printGrammarRow prints one line of the text report (the totals have no compile time).
func printGrammarRow(r grammarResult) {
	if r.Error != "" {
		fmt.Printf("%-28s error: %s\n", r.File, r.Error)
		return
	}
	comp := fmt.Sprintf("%.2fms", r.CompileMS)
	if r.File == "(all)" {
		comp = ""
	}
	fmt.Printf("%-28s %10s %7d %8.1fus %8.1fus %8.1fus %4d/%-4d\n", r.File, comp, r.Masks, r.MeanUS, r.P50US, r.P99US, r.Complete, r.Runs)
}

// benchGrammarFile times compiles of one file and masks over simulated generations.
func benchGrammarFile(path string, tok *tokenizer.Tokenizer, trie *structured.TokenTrie, rng *rand.Rand, runs, maxTokens, compiles int) (grammarResult, []time.Duration) {
	r := grammarResult{File: filepath.Base(path)}
	src, err := os.ReadFile(path)
	if err != nil {
		r.Error = err.Error()
		return r, nil
	}
	fe := grammarFrontEnds[filepath.Ext(path)]
	var tg *structured.TokenGrammar
	var times []float64
	for range compiles {
		// A compile is what a request's first use costs off the engine loop: parse,
		// lower, build the automata, bind to the tokenizer's trie.
		start := time.Now()
		g, err := fe(src)
		var comp *structured.Compiled
		if err == nil {
			comp, err = structured.Compile(g, structured.DefaultLimits())
		}
		if err != nil {
			r.Error = err.Error()
			return r, nil
		}
		tg = structured.NewTokenGrammar(comp, trie, tok)
		times = append(times, float64(time.Since(start).Nanoseconds())/1e6)
	}
	slices.Sort(times)
	r.CompileMS = percentile(times, 50)
	var masks []time.Duration
	for range runs {
		gen, err := structured.Simulate(tg, rng, maxTokens)
		if err != nil {
			r.Error = err.Error()
			return r, nil
		}
		r.Runs++
		if gen.Ended && gen.Matches {
			r.Complete++
		}
		masks = append(masks, gen.Masks...)
	}
	r.Masks = len(masks)
	r.MeanUS, r.P50US, r.P99US = durationStats(masks)
	return r, masks
}

// grammarFiles expands the arguments: files as given, folders to their grammar files.
func grammarFiles(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			if _, ok := grammarFrontEnds[filepath.Ext(a)]; !ok {
				return nil, fmt.Errorf("%s: unknown grammar extension (want %s)", a, strings.Join(frontEndExts(), ", "))
			}
			files = append(files, a)
			continue
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if _, ok := grammarFrontEnds[filepath.Ext(e.Name())]; ok && !e.IsDir() {
				files = append(files, filepath.Join(a, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no grammar files (extensions: %s)", strings.Join(frontEndExts(), ", "))
	}
	return files, nil
}

func frontEndExts() []string {
	var exts []string
	for e := range grammarFrontEnds {
		exts = append(exts, e)
	}
	sort.Strings(exts)
	return exts
}

// openGrammarTokenizer loads a tokenizer file, or a folder holding tokenizer.json or Llama
// 3's encoder.json and vocab.bpe.
func openGrammarTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var v *tokenizer.Vocab
	switch enc := filepath.Join(path, "encoder.json"); {
	case !st.IsDir():
		v, err = format.LoadVocab(path, 0)
	case fileExists(enc):
		v, err = tokenizer.VocabFromLlama3Files(enc, filepath.Join(path, "vocab.bpe"))
	default:
		v, err = format.LoadVocab(filepath.Join(path, "tokenizer.json"), 0)
	}
	if err != nil {
		return nil, err
	}
	return tokenizer.New(v)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// durationStats returns the mean, p50 and p99 of ds in microseconds.
func durationStats(ds []time.Duration) (mean, p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	us := make([]float64, len(ds))
	var sum float64
	for i, d := range ds {
		us[i] = float64(d.Nanoseconds()) / 1e3
		sum += us[i]
	}
	slices.Sort(us)
	return sum / float64(len(us)), percentile(us, 50), percentile(us, 99)
}

// percentile returns the p-th percentile of sorted xs (nearest rank).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(float64(len(xs))*p/100+0.5) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
