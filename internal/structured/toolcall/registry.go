package toolcall

import (
	"fmt"
	"slices"
	"strings"
)

// The parser names, as vLLM's --tool-call-parser names them where vLLM has the family.
const (
	Hermes         = "hermes"
	Llama3JSON     = "llama3_json"
	Mistral        = "mistral"
	Qwen3Coder     = "qwen3_coder"
	DeepSeekV3     = "deepseek_v3"
	Granite        = "granite"
	FunctionaryV31 = "functionary_v3_1"
	FunctionaryV32 = "functionary_v3_2"
	CommandR       = "command_r"
	CommandR7B     = "command_r7b"
	KimiK2         = "kimi_k2"
	GLM45          = "glm45"
	OpenAI         = "openai"
	SeedOSS        = "seed_oss"
	Apriel         = "apriel"
)

// formats makes each named format.
var formats = map[string]func() *format{
	Hermes: hermes, Llama3JSON: llama3JSON, Mistral: mistral, Qwen3Coder: qwen3Coder,
	DeepSeekV3: deepseekV3, Granite: granite, FunctionaryV31: functionaryV31,
	FunctionaryV32: functionaryV32, CommandR: commandR, CommandR7B: commandR7B, KimiK2: kimiK2, GLM45: glm45, OpenAI: harmony,
	SeedOSS: seedOSS, Apriel: apriel,
}

// Names returns the parser names, sorted.
func Names() []string {
	names := make([]string, 0, len(formats))
	for n := range formats {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// New returns a parser of the named family for one output.
func New(name string, opt Options) (*Parser, error) {
	f, ok := formats[name]
	if !ok {
		return nil, fmt.Errorf("tool-call parser %q: expected one of %s", name, strings.Join(Names(), ", "))
	}
	return newParser(f(), opt), nil
}

// detection tells a family by what its chat template writes, most specific first: Qwen3-Coder
// and GLM write <tool_call> too, functionary v3.1 <|python_tag|> as Llama does.
var detection = []struct {
	name string
	all  []string
}{
	{GLM45, []string{"<arg_key>"}},
	{SeedOSS, []string{"<seed:tool_call>"}},
	{Apriel, []string{"<tool_calls>["}},
	{Qwen3Coder, []string{"<function=", "<parameter="}},
	{DeepSeekV3, []string{"tool▁calls▁begin"}},
	{KimiK2, []string{"<|tool_calls_section_begin|>"}},
	{OpenAI, []string{"<|channel|>", "<|message|>"}},
	{Mistral, []string{"[TOOL_CALLS]"}},
	{FunctionaryV32, []string{">>>", "recipient"}},
	{FunctionaryV31, []string{"<function="}},
	{CommandR7B, []string{"<|START_ACTION|>"}},
	{CommandR, []string{"Action:", "tool_name"}},
	{Granite, []string{"<|tool_call|>"}},
	{Hermes, []string{"<tool_call>"}},
	{Llama3JSON, []string{"<|start_header_id|>", `"parameters"`, "tool_call.arguments"}},
}

// Detect names the parser for the tool-call syntax a chat template's source shows, or ""
// when it shows none kvasir knows.
func Detect(template string) string {
	for _, d := range detection {
		ok := true
		for _, s := range d.all {
			ok = ok && strings.Contains(template, s)
		}
		if ok {
			return d.name
		}
	}
	return ""
}
