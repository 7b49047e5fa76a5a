package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir"
)

// loraFlags are the multi-LoRA flags of vLLM: --enable-lora, --lora-modules, --max-loras
// and --max-lora-rank.
type loraFlags struct {
	enable          bool
	modules         loraModules
	maxLoRAs, maxRk int
}

// addLoRAFlags adds the LoRA flags to fs.
func addLoRAFlags(fs *flag.FlagSet) *loraFlags {
	f := &loraFlags{}
	fs.BoolVar(&f.enable, "enable-lora", false, "serve LoRA adapters (implied by --lora-modules); more are loaded at run time through /v1/load_lora_adapter")
	fs.Var(&f.modules, "lora-modules", `LoRA adapters to serve, name=path ... (a PEFT folder or a llama.cpp GGUF LoRA file; also {"name": ..., "path": ...}); a request's "model" picks one`)
	fs.IntVar(&f.maxLoRAs, "max-loras", kvasir.DefaultMaxLoRAs, "most LoRA adapters in one batch, each held in a slot on the device (least recently used replaced)")
	fs.IntVar(&f.maxRk, "max-lora-rank", kvasir.DefaultMaxLoRARank, "highest LoRA rank served")
	return f
}

// apply sets the LoRA options.
func (f *loraFlags) apply(opt *kvasir.Options) error {
	if f.maxLoRAs < 1 || f.maxRk < 1 {
		return fmt.Errorf("--max-loras %d --max-lora-rank %d: want at least 1", f.maxLoRAs, f.maxRk)
	}
	opt.EnableLoRA, opt.LoRAModules, opt.MaxLoRAs, opt.MaxLoRARank = f.enable, f.modules, f.maxLoRAs, f.maxRk
	return nil
}

// loraModules is the value of --lora-modules: every entry given, in order.
type loraModules []kvasir.LoRAModule

func (m *loraModules) String() string {
	var parts []string
	for _, x := range *m {
		parts = append(parts, x.Name+"="+x.Path)
	}
	return strings.Join(parts, " ")
}

// Set adds one entry: name=path, or vLLM's JSON form {"name": ..., "path": ...}.
func (m *loraModules) Set(s string) error {
	if strings.HasPrefix(strings.TrimSpace(s), "{") {
		var j struct {
			Name string `json:"name"`
			Path string `json:"path"`
		}
		if err := json.Unmarshal([]byte(s), &j); err != nil || j.Name == "" || j.Path == "" {
			return fmt.Errorf("lora module %s: want {\"name\": NAME, \"path\": PATH}", s)
		}
		*m = append(*m, kvasir.LoRAModule{Name: j.Name, Path: j.Path})
		return nil
	}
	mod, err := kvasir.ParseLoRAModule(s)
	if err != nil {
		return err
	}
	*m = append(*m, mod)
	return nil
}

// expandLoRAModules rewrites vLLM's `--lora-modules a=x b=y` (several values after one
// flag) as one flag per value, which package flag reads: the values are the arguments
// that follow up to the next flag or the first that is not name=path or JSON.
func expandLoRAModules(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		out = append(out, args[i])
		if a := args[i]; a != "--lora-modules" && a != "-lora-modules" {
			continue
		}
		if i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
		for i+1 < len(args) && isLoRAModule(args[i+1]) {
			out = append(out, "--lora-modules", args[i+1])
			i++
		}
	}
	return out
}

// isLoRAModule reports whether an argument reads as a --lora-modules value.
func isLoRAModule(s string) bool {
	if strings.HasPrefix(s, "-") {
		return false
	}
	name, _, ok := strings.Cut(s, "=")
	return strings.HasPrefix(s, "{") || (ok && name != "" && !strings.ContainsAny(name, "/\\"))
}
