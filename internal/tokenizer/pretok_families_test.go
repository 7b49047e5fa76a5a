package tokenizer

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Expressions of the model families as their tokenizer.json files (or llama.cpp, where a
// family has no tokenizer.json expression) spell them, for the oracle.
const (
	reGPT2NoTail = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	reO200kWords = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
	reGPT4o      = reO200kWords + `|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reDSV3Last   = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	reCJKKana    = `[一-龥぀-ゟ゠-ヿ]+`
)

// preFamily is one split expression (or sequence), the tokenizer.ggml.pre names llama.cpp
// gives it, whether those names ignore merges, and vectors worked out by hand from the
// expression.
type preFamily struct {
	family       string
	names        []string
	ignoreMerges bool
	exprs        []string // nil: no oracle (the vectors only)
	vectors      []preVector
}

type preVector struct {
	text string
	want []string
}

var preFamilies = []preFamily{
	{"default", []string{"", "default"}, false,
		[]string{`[\p{P}\$\+<=>\^~\|]+`, reGPT2NoTail, `\p{N}+`, `[0-9][0-9][0-9]`},
		[]preVector{
			{"Hello, world! x+=12345", []string{"Hello", ",", " world", "!", " x", "+=", "123", "45"}},
			{"a  b", []string{"a", " ", " b"}},
		}},
	{"gpt-2", []string{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling",
		"exaone4", "gigachat", "a.x-4.0", "mellum", "modern-bert", "roberta-bpe", "jina-es", "jina-de",
		"jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code"}, false,
		[]string{hfRegexGPT2},
		[]preVector{
			{"Hello world", []string{"Hello", " world"}},
			{"I'm  here\n\n", []string{"I", "'m", " ", " here", "\n\n"}},
			{"a\nb 12x+=", []string{"a", "\n", "b", " 12", "x", "+="}},
		}},
	{"llama3", []string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
		"lfm2", "jina-v5-nano"}, true,
		[]string{hfRegexLlama3},
		[]preVector{
			{"I'M 12345 x.cpp", []string{"I", "'M", " ", "123", "45", " x", ".cpp"}},
			{"!!\n\nx", []string{"!!\n\n", "x"}},
		}},
	{"llama3 (merging)", []string{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, false,
		[]string{hfRegexLlama3},
		[]preVector{{"a  \n\n  b", []string{"a", "  \n\n", " ", " b"}}}},
	{"qwen2", []string{"qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez",
		"stablelm2", "hunyuan", "solar-open", "grok-2"}, false,
		[]string{hfRegexQwen2},
		[]preVector{{"x 123!\n", []string{"x", " ", "1", "2", "3", "!\n"}}}},
	{"bailingmoe", []string{"bailingmoe", "bailingmoe2", "llada-moe"}, false,
		[]string{`'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`},
		[]preVector{{"He'LL 42", []string{"He", "'LL", " ", "4", "2"}}}},
	{"qwen35", []string{"qwen35"}, false,
		[]string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{
			{"cafe\u0301 ok", []string{"cafe\u0301", " ok"}},
			{"I'M 42", []string{"I", "'M", " ", "4", "2"}},
		}},
	{"deepseek-llm", []string{"deepseek-llm"}, false, hfDeepSeekLLMRegexes,
		[]preVector{{"Hi 3.14 你好\n", []string{"Hi", " ", "3", ".", "14", " ", "你好", "\n"}}}},
	{"deepseek-coder", []string{"deepseek-coder"}, false,
		[]string{"[\r\n]", `\s?\p{L}+`, `\s?\p{P}+`, "[一-龥ࠀ-一가-퟿]+", `\p{N}`},
		[]preVector{{"Hi, 你好123\n", []string{"Hi", ",", " ", "你好", "1", "2", "3", "\n"}}}},
	{"deepseek-v3", []string{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, false,
		[]string{`\p{N}{1,3}`, reCJKKana, reDSV3Last},
		[]preVector{
			{"Hello 世界, 12345 (ok)", []string{"Hello", " ", "世界", ",", " ", "123", "45", " (", "ok", ")"}},
			{".cpp x", []string{".cpp", " x"}},
		}},
	{"spark2_5", []string{"spark2_5"}, false,
		[]string{`\p{N}{1,3}`, reCJKKana,
			"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\\r\\n]|\\s+(?!\\S)|\\s+",
			`\p{N}`},
		[]preVector{{"Hi!\n\n42", []string{"Hi", "!", "\n", "\n", "4", "2"}}}},
	{"afmoe", []string{"afmoe"}, false,
		[]string{`(?<!\p{N})\p{N}{1,2}(?=(?:\p{N}{3})*(?!\p{N}))|\p{N}{3}`,
			"[\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u3040-\u309F\u30A0-\u30FF\uFF65-\uFF9F\u2F00-\u2FDF\u0E40-\u0E7F\u0E80-\u0EFF\u1780-\u17FF\u1000-\u109F\uAA60-\uAA7F\uA9E0-\uA9FF\uAC00-\uD7AF\u1100-\u11FF]+", reDSV3Last},
		[]preVector{{"v1234567 ไทย", []string{"v", "1", "234", "567", " ", "ไ", "ทย"}}}},
	{"falcon", []string{"falcon"}, false,
		[]string{"[\\p{P}\\$\\+<=>\\^~\\|`]+", reGPT2NoTail, `[0-9][0-9][0-9]`},
		[]preVector{{"x`y 1234", []string{"x", "`", "y", " ", "123", "4"}}}},
	{"starcoder", []string{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
		"mellum2"}, false,
		[]string{`\p{N}`, reGPT2NoTail},
		[]preVector{{"abc 2024!", []string{"abc", " ", "2", "0", "2", "4", "!"}}}},
	{"bloom", []string{"poro-chat", "bloom", "gpt3-finnish"}, false,
		[]string{` ?[^(\s|.,!?…。，、।۔،)]+`},
		[]preVector{{"Hello, world. (x|y)", []string{"Hello", ",", " world", ". (", "x", "|", "y", ")"}}}},
	{"viking", []string{"viking"}, false,
		[]string{` ?[^(\s|.,!?…。，、।۔،)]+`, `\p{N}`},
		[]preVector{{"a1 22", []string{"a", "1", " ", "2", "2"}}}},
	{"gpt-4o", []string{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, false,
		[]string{reGPT4o},
		[]preVector{
			{"HelloWorld's 12345 /path\n", []string{"Hello", "World's", " ", "123", "45", " /", "path", "\n"}},
			{"x!\n\ny", []string{"x", "!\n\n", "y"}},
			{"a你", []string{"a你"}},
		}},
	{"granite-embed-multi-97m", []string{"granite-embed-multi-97m"}, true, []string{reGPT4o},
		[]preVector{{"camelCase", []string{"camel", "Case"}}}},
	{"tekken", []string{"tekken"}, true,
		[]string{`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{{"HelloWorld's 12", []string{"Hello", "World", "'s", " ", "1", "2"}}}},
	{"tiny_aya", []string{"tiny_aya", "cohere2moe"}, false,
		[]string{`\d{1,3}(?=(?:\d{3})*\b)`, reGPT4o},
		[]preVector{
			{"1234567 apples", []string{"1", "234", "567", " apples"}},
			{"12ab", []string{"12", "ab"}},
		}},
	{"kimi-k2", []string{"kimi-k2"}, false,
		[]string{`[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{
			{"你好World 123", []string{"你好", "World", " ", "123"}},
			{"a你", []string{"a", "你"}},
		}},
	{"youtu", []string{"youtu"}, true,
		[]string{`[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|` + reCJKKana[:len(reCJKKana)-1] + `+`,
			reO200kWords + `|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{
			{"안녕하세요camelCase", []string{"안녕하세요", "camel", "Case"}},
			{"x12", []string{"x", "1", "2"}},
		}},
	{"superbpe", []string{"superbpe"}, false,
		[]string{`\p{N}+`, `(?=(\d{3})+(?!\d))`},
		[]preVector{{"in 1234567 days", []string{"in ", "1", "234", "567", " days"}}}},
	{"seed-coder", []string{"seed-coder"}, false,
		[]string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{{"x!\n\ny", []string{"x", "!", "\n\n", "y"}}}},
	{"ufakzeka", []string{"ufakzeka"}, false,
		[]string{`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{
			{"Ali'nin 2", []string{"Ali", "'nin", " ", "2"}},
			{"we'llx", []string{"we", "'llx"}},
		}},
	{"laguna", []string{"laguna"}, false,
		[]string{`[^\n]+|[\n]+`, hfRegexQwen2},
		[]preVector{{"a!\nb", []string{"a", "!", "\n", "b"}}}},
	{"exaone-moe", []string{"exaone-moe"}, false,
		[]string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+`},
		[]preVector{{"Hello world 42 x/\ny", []string{"Hello world", " ", "4", "2", " x", "/\n", "y"}}}},
	{"minicpm5", []string{"minicpm5"}, true,
		[]string{`\p{N}{1,3}`, `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
		[]preVector{
			{"abc12345", []string{"abc", "123", "45"}},
			{"  12", []string{"  ", "12"}},
		}},
	{"jais-2", []string{"jais-2"}, false,
		[]string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}`},
		[]preVector{
			{"a     b", []string{"a", "    ", " b"}},
			{"x   ", []string{"x", "  ", " "}},
		}},
	{"gemma4", []string{"gemma4", "granite-embed-multi-311m"}, false,
		[]string{`[^\n]+|[\n]+`},
		[]preVector{{"a▁b\n\nc", []string{"a▁b", "\n\n", "c"}}}},
	{"sarvam-moe", []string{"sarvam-moe"}, false,
		[]string{`[^\n]+|[\n]+`},
		[]preVector{{"\nx y", []string{"\n", "x y"}}}},
	{"whitespace", []string{"whitespace"}, false,
		[]string{`\S+`},
		[]preVector{{" a  b ", []string{" ", "a", "  ", "b", " "}}}},
	{"chameleon", []string{"chameleon"}, false,
		[]string{`<sentinel:[0-9]+>`, `(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z`, "([\\t\\n]|    |  )", `\p{N}`,
			"[\\p{P}!-/:-@\\[-`{-~]", reGPT2NoTail},
		[]preVector{{"<sentinel:12>IMGIMGABZ  x\t1.5",
			[]string{"<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ", "  ", "x", "\t", "1", ".", "5"}}}},
}

// TestPreTokenizerNames checks every name against the hand-worked vectors of its family and
// its merge rule, and that every name kvasir knows is listed here (so none goes untested).
func TestPreTokenizerNames(t *testing.T) {
	listed := map[string]bool{}
	for _, f := range preFamilies {
		for _, name := range f.names {
			if listed[name] {
				t.Errorf("%q listed twice", name)
			}
			listed[name] = true
			spec, err := preTokenizerFor(name)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if spec.ignoreMerges != f.ignoreMerges {
				t.Errorf("%s: ignoreMerges %v, want %v", name, spec.ignoreMerges, f.ignoreMerges)
			}
			for _, v := range f.vectors {
				if got := collectWords(spec.split, v.text); !slices.Equal(got, v.want) {
					t.Errorf("%s (%s) on %q:\n got %q\nwant %q", name, f.family, v.text, got, v.want)
				}
			}
		}
	}
	var missing []string
	for name := range preSpecs {
		if !listed[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("names without a test: %q", missing)
	}
	if _, err := preTokenizerFor("no-such-pre"); err == nil {
		t.Error("unknown name accepted")
	}
}

// TestPreTokenizerFamiliesDifferential runs random strings through every family's split and
// its expressions in a backtracking engine.
func TestPreTokenizerFamiliesDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := 400
	if testing.Short() {
		n = 100
	}
	for _, f := range preFamilies {
		spec, err := preTokenizerFor(f.names[0])
		if err != nil {
			t.Fatal(err)
		}
		fam := pretokFamily{f.family, spec.split, f.exprs}
		o := newOracle(t, f.exprs...)
		for _, v := range f.vectors {
			checkPretok(t, fam, o, v.text)
		}
		for i := 0; i < n; i++ {
			data := make([]byte, 1+rng.IntN(24))
			for k := range data {
				data[k] = byte(rng.UintN(256))
			}
			checkPretok(t, fam, o, pretokInput(data))
		}
	}
}

// TestPreTokenizersLongRuns feeds every family long runs of one kind of character, where a
// rule that rescans the rest of a run at each position would take quadratic time.
func TestPreTokenizersLongRuns(t *testing.T) {
	const n = 20000
	var inputs []string
	for _, unit := range []string{"1", " ", "a", "aB", "\u0301", "'", "\n ", "中", "½", ".", "IMG"} {
		inputs = append(inputs, strings.Repeat(unit, n/len(unit)), strings.Repeat(unit, n/len(unit))+"x")
	}
	for _, f := range preFamilies {
		spec, err := preTokenizerFor(f.names[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range inputs {
			var sb strings.Builder
			spec.split(in, func(w string) { sb.WriteString(w) })
			if sb.String() != in {
				t.Fatalf("%s: pieces do not cover a run of %q", f.family, in[:4])
			}
		}
	}
}
